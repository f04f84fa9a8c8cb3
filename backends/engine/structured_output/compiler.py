"""``GrammarCompiler``: a ``StructuredOutput`` -> xgrammar's compiled grammar, cached.

One ``xgrammar.TokenizerInfo`` is built per engine from its own tokenizer (the vocabulary as the model's
logits index it, decoded the way the tokenizer decodes: byte-level BPE, byte fallback or raw; its special
tokens never generated; eos the stop token), then every constraint compiles once: a bounded LRU keyed by
the ``StructuredOutput`` (hashable) hands the same ``CompiledGrammar`` to every later request that asks
for it. Compiling is thread-safe, so a server compiles off its event loop and the step loop only looks up.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xgrammar as xgr

from backends.engine.structured_output.errors import GrammarError
from backends.engine.structured_output.schema_support import UnsupportedSchemaError, check_enforceable
from backends.engine.structured_output.spec import StructuredOutput

if TYPE_CHECKING:
    from backends.engine.tokenizer import Tokenizer

__all__ = [
    "GrammarCompiler",
    "GrammarCompilerConfig",
    "build_tokenizer_info",
    "json_schema_grammar",
    "tag_schemas",
]

_XGRAMMAR_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: (Check failed: \(.*?\) is false: )?")
"""xgrammar's C++ errors start with a time, a source file and a failed check: not the user's business."""
_STRICT_STRING_CHAR = r"[^\0-\x1f\"\\\uD800-\uDFFF]"
"""A JSON string's unescaped character: no control character, quote, backslash or lone surrogate."""
_LOOSE_STRING_CHARS = (r"[^\"\\\r\n]", r"[^\0-\x1f\"\\\r\n]")
"""How xgrammar 0.2.8 writes it: raw control characters allowed in length-bounded strings; surrogate
code points (invalid UTF-8, which decodes to three replacement characters) allowed everywhere."""


@dataclass(frozen=True)
class GrammarCompilerConfig:
    """How constraints compile."""

    max_cached_grammars: int = 256
    """Compiled grammars kept (least recently used dropped first); a cached one costs a dict lookup."""
    max_threads: int = 2
    """xgrammar's compile threads (it precomputes the token masks of each grammar state)."""
    max_whitespace: int | None = 16
    """Most whitespace characters between two JSON tokens (None: unlimited). A bound stops a model that
    keeps choosing spaces from running to max_tokens inside valid-but-endless JSON."""


class GrammarCompiler:
    """Compiles each ``StructuredOutput`` kind with xgrammar, once, for one tokenizer."""

    def __init__(
        self, tokenizer: Tokenizer, vocab_size: int, config: GrammarCompilerConfig | None = None
    ) -> None:
        """``vocab_size``: the width of the model's logits (may differ from the tokenizer's vocabulary)."""
        self.config = config or GrammarCompilerConfig()
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._built: tuple[xgr.TokenizerInfo, xgr.GrammarCompiler] | None = None  # on first use
        self._cache: OrderedDict[StructuredOutput, xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()
        self.num_compiled = 0
        """Constraints compiled (cache misses)."""

    @property
    def tokenizer_info(self) -> xgr.TokenizerInfo:
        """xgrammar's view of the tokenizer (built on first use: a free-text engine never pays for it)."""
        return self._build()[0]

    def _build(self) -> tuple[xgr.TokenizerInfo, xgr.GrammarCompiler]:
        with self._lock:
            if self._built is None:
                info = build_tokenizer_info(self._tokenizer, self._vocab_size)
                compiler = xgr.GrammarCompiler(info, max_threads=self.config.max_threads, cache_enabled=False)
                self._built = (info, compiler)
            return self._built

    def compile(self, spec: StructuredOutput) -> xgr.CompiledGrammar:
        """The compiled grammar of ``spec``, from the cache when it was compiled before; ``GrammarError``
        when the constraint is invalid (never cached: each bad request hears why)."""
        with self._lock:
            compiled = self._cache.get(spec)
            if compiled is not None:
                self._cache.move_to_end(spec)
                return compiled
        compiled = self._compile(spec)  # outside the lock: two threads may compile one spec, both right
        with self._lock:
            self._cache[spec] = compiled
            self._cache.move_to_end(spec)
            while len(self._cache) > self.config.max_cached_grammars:
                self._cache.popitem(last=False)
            self.num_compiled += 1
        return compiled

    def _compile(self, spec: StructuredOutput) -> xgr.CompiledGrammar:
        kind = _kind_of(spec)
        try:
            return self._compile_kind(spec)
        except UnsupportedSchemaError as exc:  # valid, but the grammar would let a violation through
            raise GrammarError(f"unsupported JSON Schema: {exc}", kind=kind) from None
        except (RuntimeError, ValueError, TypeError, xgr.InvalidJSONError) as exc:
            raise GrammarError(f"invalid {kind.replace('_', ' ')}: {_clean(exc)}", kind=kind) from None

    def _compile_kind(self, spec: StructuredOutput) -> xgr.CompiledGrammar:
        compiler, ws = self._build()[1], self.config.max_whitespace
        if spec.json_schema is not None:
            schema = json.loads(spec.json_schema)  # a JSONDecodeError is a ValueError: said plainly
            if not isinstance(schema, dict | bool):
                raise ValueError("a JSON Schema is an object or a boolean")
            check_enforceable(schema)
            return compiler.compile_grammar(json_schema_grammar(spec.json_schema, ws))
        if spec.json_object:
            return compiler.compile_grammar(json_schema_grammar('{"type": "object"}', ws))
        if spec.regex is not None:
            return compiler.compile_regex(spec.regex)
        if spec.choice is not None:
            if not spec.choice or not all(isinstance(c, str) and c for c in spec.choice):
                raise ValueError("choices must be a non-empty list of non-empty strings")
            literals = " | ".join(json.dumps(c, ensure_ascii=False) for c in spec.choice)
            return compiler.compile_grammar(f"root ::= {literals}")
        if spec.grammar is not None:
            return compiler.compile_grammar(spec.grammar)
        assert spec.structural_tag is not None
        for schema in tag_schemas(spec.structural_tag):
            check_enforceable(schema)
        return compiler.compile_structural_tag(spec.structural_tag)


def json_schema_grammar(schema: str, max_whitespace: int | None) -> str:
    """xgrammar's EBNF for a JSON Schema, its string characters made strict (``_LOOSE_STRING_CHARS``):
    every output then parses with any JSON parser and counts ``maxLength`` as Python does."""
    text = str(xgr.Grammar.from_json_schema(schema, max_whitespace_cnt=max_whitespace))
    for loose in _LOOSE_STRING_CHARS:
        text = text.replace(loose, _STRICT_STRING_CHAR)
    return text


def tag_schemas(structural_tag: str) -> Iterator[Any]:
    """The JSON Schemas inside a structural tag (each ``json_schema`` format, and each legacy
    ``structures`` entry's ``schema``), found without recursion: forced tool calls' arguments must be
    as enforceable as a ``response_format`` schema. A tag that is not JSON has none (xgrammar says why)."""
    try:
        stack: list[Any] = [json.loads(structural_tag)]
    except ValueError:
        return
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "json_schema" and "json_schema" in node:
                yield node["json_schema"]
            elif {"begin", "schema", "end"} <= node.keys():
                yield node["schema"]
            else:
                stack.extend(value for value in node.values() if isinstance(value, dict | list))


def build_tokenizer_info(tokenizer: Tokenizer, vocab_size: int) -> xgr.TokenizerInfo:
    """xgrammar's view of ``tokenizer``: each id's token string (special tokens empty, so a grammar never
    produces them), how strings decode (read from the tokenizer's own decoder), eos plus the chat's
    end-of-turn tokens as stop tokens."""
    backend = tokenizer.backend
    encoded: list[str] = [""] * vocab_size
    for token, token_id in backend.get_vocab(with_added_tokens=True).items():
        if token_id < vocab_size:
            encoded[token_id] = token
    for token_id, added in backend.get_added_tokens_decoder().items():
        if added.special and token_id < vocab_size:
            encoded[token_id] = ""
    metadata = xgr.TokenizerInfo._detect_metadata_from_hf(backend.to_str())
    stop_ids = [tokenizer.eos_token_id, *getattr(tokenizer, "chat_stop_token_ids", ())]
    return xgr.TokenizerInfo(
        encoded,
        metadata["vocab_type"],
        vocab_size=vocab_size,
        stop_token_ids=[t for t in dict.fromkeys(stop_ids) if t < vocab_size],
        add_prefix_space=metadata["add_prefix_space"],
    )


def _kind_of(spec: StructuredOutput) -> str:
    if spec.json_object:
        return "json_object"
    for kind in ("json_schema", "regex", "choice", "grammar", "structural_tag"):
        if getattr(spec, kind) is not None:
            return kind
    raise AssertionError("a StructuredOutput sets one constraint")


def _clean(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return _XGRAMMAR_PREFIX.sub("", lines[0] if lines else type(exc).__name__).strip()
