"""Text <-> token ids and the chat template (streamed text, token by token, is ``detokenizer.py``'s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tokenizers

from backends.engine.chat_template import render_chat_template
from backends.engine.errors import ModelLoadError


class Tokenizer:
    """A ``tokenizers.Tokenizer`` plus the special ids and chat template of one model.

    ``chat_stop_token_ids``: tokens besides eos that close a chat reply, such as Gemma's
    ``<end_of_turn>``. A base model ends a completion only at eos (as transformers' generate does for
    a GGUF), but a chat reply ends where the template closes the model's turn, so a chat request
    stops on these as well by carrying them in its ``stop_token_ids``. vLLM stops every request on all
    of a model's generation_config eos ids instead; a GGUF names only one.
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        eos_token_id: int,
        bos_token_id: int | None = None,
        chat_template: str | None = None,
        add_bos_token: bool = False,
        chat_stop_token_ids: tuple[int, ...] = (),
    ) -> None:
        self.backend = backend
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id
        self.chat_template = chat_template
        self.add_bos_token = add_bos_token
        self.chat_stop_token_ids = chat_stop_token_ids
        self.vocab_size = backend.get_vocab_size()
        self._token_cache: dict[int, str] = {}

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> Tokenizer:
        """Read tokenizer.json and tokenizer_config.json (special tokens, chat template)."""
        path = Path(path)
        if not (path / "tokenizer.json").exists():
            raise ModelLoadError(f"{path} has no tokenizer.json")
        backend = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        cfg: dict[str, Any] = {}
        if (path / "tokenizer_config.json").exists():
            cfg = json.loads((path / "tokenizer_config.json").read_text())
        template = cfg.get("chat_template")
        if template is None and (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text()

        def token_id(key: str) -> int | None:
            tok = cfg.get(key)
            if isinstance(tok, dict):
                tok = tok.get("content")
            return backend.token_to_id(tok) if tok else None

        eos = token_id("eos_token")
        if eos is None and (path / "config.json").exists():
            eos = json.loads((path / "config.json").read_text()).get("eos_token_id")
            eos = eos[0] if isinstance(eos, list) else eos
        if eos is None:
            raise ModelLoadError(f"{path}: no eos token in tokenizer_config.json or config.json")
        return cls(
            backend,
            eos_token_id=eos,
            bos_token_id=token_id("bos_token"),
            chat_template=template if isinstance(template, str) else None,
            add_bos_token=bool(cfg.get("add_bos_token", False)),
        )

    def save(self, path: str | Path) -> None:
        """Write tokenizer.json and tokenizer_config.json (special tokens, ``add_bos_token``, the chat
        template) into ``path``: what a process with only the ``tokenizers`` package needs to tokenize
        prompts as this engine does (a GGUF's tokenizer too); ``from_hf_dir`` reads them back."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path / "tokenizer.json"))
        config = {
            "bos_token": self._token_str(self.bos_token_id) or None,
            "eos_token": self._token_str(self.eos_token_id),
            "add_bos_token": self.add_bos_token,
            "chat_template": self.chat_template,
        }
        (path / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """One token's text on its own (for logprobs), cached."""
        text = self._token_cache.get(token_id)
        if text is None:
            text = self.backend.decode([token_id], skip_special_tokens=False)
            self._token_cache[token_id] = text
        return text

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **context: Any
    ) -> str:
        if not self.chat_template:
            raise ValueError("this model has no chat template; use the completions endpoint")
        special = {
            "bos_token": self._token_str(self.bos_token_id),
            "eos_token": self._token_str(self.eos_token_id),
        }
        return render_chat_template(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            **{**special, **context},
        )

    def _token_str(self, token_id: int | None) -> str:
        return "" if token_id is None else (self.backend.id_to_token(token_id) or "")
