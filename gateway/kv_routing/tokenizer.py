"""A pool model's prompt token ids, as its engine prefills them.

KV blocks are named by token ids, so the gateway must tokenize a request exactly as the engine will:
``tokenizer.json`` through the ``tokenizers`` library, and for a chat request the model's chat
template (``tokenizer_config.json``'s ``chat_template``, or ``chat_template.jinja``) rendered with
jinja2 in a sandbox, with ``add_generation_prompt`` and the request's ``tools``, then encoded without
special tokens (the template writes them), as vLLM and the reference engine do. A text prompt is
encoded with the BOS token when the model's config asks for one; a prompt of token ids is taken as is.

Only the prompt's head matters, so a long prompt is cut before encoding (at ``8 * max_tokens``
characters) and only tokens ending well before the cut are kept: a token that straddles the cut
could differ from the engine's. A chat prompt is encoded a piece at a time between the template's
special tokens, and the pieces are remembered (``segments.py``): a conversation's next turn encodes
only its new messages, where the tokenizer agrees on sample conversations that the pieces give the
whole prompt's ids. Loading a tokenizer reads megabytes, so :class:`TokenizerCache` loads
each directory once, in a thread, and answers None until it is ready (the pick falls back).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import tokenizers

from gateway.kv_routing.segments import SegmentEncoder
from sortyard.chat_templates import template_environment

__all__ = ["PromptTokenizer", "TokenizerCache"]

logger = logging.getLogger("sortyard.kv_routing")

_CHARS_PER_TOKEN_CUT = 8
_CUT_MARGIN_CHARS = 64  # a pre-token (a word, a run of digits) cut in two re-tokenizes differently
_INLINE_CHARS = 4096  # shorter prompts encode in well under a millisecond: a thread would cost more


class PromptTokenizer:
    """One model's tokenizer and chat template."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        chat_template: str | None = None,
        bos_token: str = "",
        eos_token: str = "",
        add_bos_token: bool = False,
    ) -> None:
        self.backend = backend
        self.template = template_environment().from_string(chat_template) if chat_template else None
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.bos_token_id = backend.token_to_id(bos_token) if bos_token else None
        self.add_bos_token = add_bos_token
        self.segments = SegmentEncoder(backend)
        self.cuts_chats = self.template is not None and self.segments.agrees(self._samples())
        """Chat prompts are encoded piece by piece, remembering the pieces (checked on samples)."""

    @classmethod
    def from_dir(cls, path: str | Path) -> PromptTokenizer:
        """Read ``tokenizer.json`` and, when present, ``tokenizer_config.json`` (OSError, ValueError)."""
        path = Path(path)
        backend = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        backend.no_truncation()  # a model's tokenizer.json may cut at its embedding size; the engine does not
        backend.no_padding()
        config: dict[str, Any] = {}
        if (path / "tokenizer_config.json").exists():
            config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
            template = named.get("default")
        if template is None and (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text(encoding="utf-8")
        return cls(
            backend,
            chat_template=template if isinstance(template, str) else None,
            bos_token=_token_text(config.get("bos_token")),
            eos_token=_token_text(config.get("eos_token")),
            add_bos_token=bool(config.get("add_bos_token", False)),
        )

    def prompt_ids(self, body: Mapping[str, Any], max_tokens: int = 4096) -> list[int] | None:
        """The first ``max_tokens`` token ids the engine would prefill for ``body`` (a chat or text
        completion request); None when that cannot be known (no template, a Responses request, a
        template that refuses the conversation)."""
        prompt = self._prompt(body)
        if prompt is None or isinstance(prompt, list):
            return prompt[:max_tokens] if prompt is not None else None
        return self._encode(*prompt, max_tokens)

    async def prompt_ids_off_loop(self, body: Mapping[str, Any], max_tokens: int = 4096) -> list[int] | None:
        """:meth:`prompt_ids`, with a long prompt encoded in a thread (tokenizers lets go of the GIL in
        a batch encode): tens of thousands of characters take milliseconds the event loop must not lose.
        A chat prompt cut into pieces counts only the pieces not yet encoded: a long conversation's next
        turn is a short encode, cheaper inline than a thread's hop."""
        prompt = self._prompt(body)
        if prompt is None or isinstance(prompt, list):
            return prompt[:max_tokens] if prompt is not None else None
        text, _, is_chat = prompt
        if is_chat and self.cuts_chats:
            to_encode = self.segments.new_chars(text[: max_tokens * _CHARS_PER_TOKEN_CUT])
        else:
            to_encode = len(text)
        if to_encode <= _INLINE_CHARS:
            return self._encode(*prompt, max_tokens)
        return await asyncio.to_thread(self._encode, *prompt, max_tokens, True)

    def _samples(self) -> list[str]:
        """Conversations rendered with the model's template, for ``SegmentEncoder.agrees``."""
        assert self.template is not None
        turns = [
            ("system", "You are a helpful assistant. Answer briefly."),
            ("user", "Hello there!  How are you?\n"),
            ("assistant", " Fine, thanks.\n\nAnd you? 12345"),
            ("user", "Prix : 42,50 € — naïve café 🙂\tdef f(x):\n    return x**2\n   "),
        ]
        rendered = []
        for first in (0, 1):  # with a system prompt, and without (some templates refuse one)
            messages = [{"role": role, "content": content} for role, content in turns[first:]]
            context = {"bos_token": self.bos_token, "eos_token": self.eos_token}
            try:
                rendered.append(
                    self.template.render(messages=messages, add_generation_prompt=True, **context)
                )
            except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError):
                continue
        return rendered

    def _prompt(self, body: Mapping[str, Any]) -> tuple[str, bool, bool] | list[int] | None:
        """The prompt's text, whether BOS goes first and whether it is a chat's, or its token ids;
        None if unknowable."""
        messages = body.get("messages")
        if isinstance(messages, list):
            if self.template is None:
                return None
            context: dict[str, Any] = {"bos_token": self.bos_token, "eos_token": self.eos_token}
            if body.get("tools"):
                context["tools"] = body["tools"]
            try:
                text = self.template.render(messages=messages, add_generation_prompt=True, **context)
            except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError):
                return None
            return text, False, True  # the template writes the special tokens
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return prompt, self.add_bos_token, False
        if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            return prompt
        return None

    def _encode(
        self, text: str, add_bos: bool, is_chat: bool, max_tokens: int, in_thread: bool = False
    ) -> list[int]:
        cut = max_tokens * _CHARS_PER_TOKEN_CUT
        if is_chat and self.cuts_chats:
            margin = _CUT_MARGIN_CHARS if len(text) > cut else None
            return self.segments.encode(text[:cut], max_tokens, margin, in_thread=in_thread)
        if in_thread:  # encode_batch lets go of the GIL: the event loop runs meanwhile
            encoding = self.backend.encode_batch([text[:cut]], add_special_tokens=False)[0]
        else:
            encoding = self.backend.encode(text[:cut], add_special_tokens=False)
        ids: list[int] = encoding.ids
        if len(text) > cut:  # keep only the tokens the cut cannot have changed
            limit = cut - _CUT_MARGIN_CHARS
            ids = [i for i, (_, end) in zip(ids, encoding.offsets, strict=True) if end <= limit]
        if add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids[:max_tokens]


def _token_text(raw: Any) -> str:
    if isinstance(raw, Mapping):
        raw = raw.get("content")
    return raw if isinstance(raw, str) else ""


class TokenizerCache:
    """Each tokenizer directory loaded once, off the event loop; None until loaded (or if it failed)."""

    def __init__(self) -> None:
        self._loaded: dict[str, PromptTokenizer | None] = {}
        self._loading: dict[str, asyncio.Future[PromptTokenizer | None]] = {}

    def get(self, directory: str) -> PromptTokenizer | None:
        """The directory's tokenizer, or None while it loads (the first call starts the load)."""
        if directory in self._loaded:
            return self._loaded[directory]
        if directory not in self._loading:
            self._loading[directory] = asyncio.ensure_future(self.load(directory))
        return None

    async def load(self, directory: str) -> PromptTokenizer | None:
        """Load ``directory`` now (in a thread); a failure is logged once and remembered as None."""
        if directory in self._loaded:
            return self._loaded[directory]
        try:
            tokenizer: PromptTokenizer | None = await asyncio.to_thread(PromptTokenizer.from_dir, directory)
        except Exception as e:  # OSError, bad JSON, a bad template, or tokenizers' own bare Exception
            logger.warning("kv routing: cannot load the tokenizer in %s: %r", directory, e)
            tokenizer = None
        self._loaded[directory] = tokenizer
        self._loading.pop(directory, None)
        return tokenizer
