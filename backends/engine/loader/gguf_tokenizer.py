"""The tokenizer a GGUF describes in its metadata, rebuilt with ``tokenizers`` as transformers does.

Two kinds are read: ``gpt2`` (byte-level BPE with merges, SmolLM2, Qwen2) and ``llama`` for Gemma
(SentencePiece BPE with byte fallback; the file lists no merges). For Gemma, transformers' GGUF
tokenizer is the reference it must equal token for token: runs of spaces stored as real spaces are
spelled with "▁", and the merges are rebuilt from the vocabulary, ranked by the order of the tokens in
the file (Gemma's scores do not follow the merge order).
"""

from __future__ import annotations

from typing import Any

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from backends.engine.chat_template import GEMMA3_CHAT_TEMPLATE
from backends.engine.errors import ModelLoadError
from backends.engine.tokenizer import Tokenizer

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
SPIECE_SPACE = "\u2581"
END_OF_TURN = "<end_of_turn>"


def gguf_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """The tokenizer of a GGUF's metadata; ModelLoadError for a kind this engine does not rebuild."""
    kind, arch = meta.get("tokenizer.ggml.model"), meta.get("general.architecture")
    if kind == "gpt2":
        return _wrap(meta, _byte_level_bpe(meta), chat_template=meta.get("tokenizer.chat_template"))
    if kind == "llama" and arch == "gemma3":
        backend = _gemma_bpe(meta)
        end_of_turn = backend.token_to_id(END_OF_TURN)
        return _wrap(
            meta,
            backend,
            # Gemma GGUFs carry no template; the documented one is the model family's own
            chat_template=meta.get("tokenizer.chat_template") or GEMMA3_CHAT_TEMPLATE,
            chat_stop_token_ids=() if end_of_turn is None else (end_of_turn,),
        )
    raise ModelLoadError(
        f"unsupported GGUF tokenizer {kind!r} for architecture {arch!r} "
        "(supported: gpt2 byte-level BPE, and llama/SentencePiece for gemma3)"
    )


def _wrap(
    meta: dict[str, Any],
    backend: tokenizers.Tokenizer,
    *,
    chat_template: str | None,
    chat_stop_token_ids: tuple[int, ...] = (),
) -> Tokenizer:
    bos = meta.get("tokenizer.ggml.bos_token_id")
    return Tokenizer(
        backend,
        eos_token_id=int(meta["tokenizer.ggml.eos_token_id"]),
        bos_token_id=None if bos is None else int(bos),
        chat_template=chat_template,
        add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        chat_stop_token_ids=chat_stop_token_ids,
    )


def _byte_level_bpe(meta: dict[str, Any]) -> tokenizers.Tokenizer:
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    backend = tokenizers.Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if meta.get("tokenizer.ggml.pre") in ("smollm", "starcoder"):
        # these pre-tokenizers split digits one by one before the GPT-2 regex
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        backend.pre_tokenizer = byte_level
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    types = meta.get("tokenizer.ggml.token_type") or []
    backend.add_special_tokens(
        [
            tokenizers.AddedToken(tokens[i], special=True, normalized=False)
            for i, kind in enumerate(types)
            if kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
        ]
    )
    return backend


def _gemma_bpe(meta: dict[str, Any]) -> tokenizers.Tokenizer:
    """transformers' GemmaTokenizer over the file's vocabulary: spaces normalised to "▁", BPE with byte
    fallback, control tokens special and user-defined ones (``\\n\\n``, ``<table>``...) added whole."""
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    respelled = [SPIECE_SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {tok: i for i, tok in enumerate(respelled)}
    unk = tokens[int(meta.get("tokenizer.ggml.unknown_token_id", 3))]
    backend = tokenizers.Tokenizer(
        models.BPE(vocab, _merges_by_rank(vocab), fuse_unk=True, unk_token=unk, byte_fallback=True)
    )
    backend.normalizer = normalizers.Replace(" ", SPIECE_SPACE)
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    types: list[int] = meta.get("tokenizer.ggml.token_type") or []
    backend.add_special_tokens(
        [
            tokenizers.AddedToken(tok, special=True, normalized=False)
            for tok, kind in zip(tokens, types, strict=True)
            if kind == TOKEN_TYPE_CONTROL
        ]
    )
    # the file's own spelling is looked up, so the space runs respelled above are not added whole
    backend.add_tokens(
        [
            tokenizers.AddedToken(tok, special=False, normalized=False)
            for tok, kind in zip(tokens, types, strict=True)
            if kind == TOKEN_TYPE_USER_DEFINED and tok in vocab
        ]
    )
    return backend


def _merges_by_rank(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every (left, right) split of a token into two tokens, best first: tokens earlier in the file
    first, and within a token the longer left part first. Equals transformers' ``generate_merges``
    ranked by negated position, without its sorts."""
    merges: list[tuple[str, str]] = []
    for token in sorted(vocab, key=vocab.__getitem__):
        for i in range(len(token) - 1, 0, -1):
            left, right = token[:i], token[i:]
            if left in vocab and right in vocab:
                merges.append((left, right))
    return merges
