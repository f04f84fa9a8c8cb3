"""The tokenizer rebuilt from GGUF metadata equals transformers' GGUF tokenizer: a small Gemma-style
SentencePiece vocabulary written to a GGUF, read by both (the real 270M vocabulary is checked in
test_gemma3_gguf.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFWriter

from backends.engine.chat_template import GEMMA3_CHAT_TEMPLATE
from backends.engine.errors import ModelLoadError
from backends.engine.loader.gguf_file import read_gguf
from backends.engine.loader.gguf_tokenizer import gguf_tokenizer

NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
PIECES = [
    "▁", "t", "h", "e", "a", "n", "d", "o", "g", "▁t", "he", "▁the", "an", "nd", "▁an", "▁and", "▁a",
    "do", "og", "▁do", "▁dog", "東", "京", "東京", "▁東京", "é", "▁é", "th", "▁th",
]  # fmt: skip
TEXTS = [
    "the dog and the dog",
    "  the   dog  ",
    "東京 é ü ☃",
    "<start_of_turn>user\nthe dog<end_of_turn>\n\n<table>",
    "the\n\n\nand\t\tdo",
]


def _vocab() -> list[tuple[str, int]]:
    vocab = [(tok, CONTROL) for tok in SPECIALS]
    vocab += [("<start_of_turn>", CONTROL), ("<end_of_turn>", CONTROL), ("\n", USER_DEFINED)]
    vocab += [("\n\n", USER_DEFINED), ("  ", USER_DEFINED), ("   ", USER_DEFINED), ("<table>", USER_DEFINED)]
    vocab += [(f"<0x{b:02X}>", BYTE) for b in range(256)]
    vocab += [(piece, NORMAL) for piece in PIECES]
    return vocab


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tok.gguf"
    vocab = _vocab()
    writer = GGUFWriter(path, "gemma3")
    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_string("tokenizer.ggml.pre", "default")
    writer.add_array("tokenizer.ggml.tokens", [tok for tok, _ in vocab])
    writer.add_array("tokenizer.ggml.scores", [0.0] * len(vocab))  # Gemma's scores carry no merge order
    writer.add_array("tokenizer.ggml.token_type", [kind for _, kind in vocab])
    for key, value in (("bos", 2), ("eos", 1), ("unknown", 3), ("padding", 0)):
        writer.add_uint32(f"tokenizer.ggml.{key}_token_id", value)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def hf_tokenizer(gguf_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, tokenizer_type="gemma")


def test_backend_equals_transformers(gguf_path: Path, hf_tokenizer: Any) -> None:
    ours = json.loads(gguf_tokenizer(read_gguf(gguf_path).metadata).backend.to_str())
    theirs = json.loads(hf_tokenizer.backend_tokenizer.to_str())
    for part in ("model", "normalizer", "pre_tokenizer", "decoder", "added_tokens"):
        assert ours[part] == theirs[part], part


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_equal_transformers(gguf_path: Path, hf_tokenizer: Any, text: str) -> None:
    tok = gguf_tokenizer(read_gguf(gguf_path).metadata)
    ids = tok.encode(text)
    assert ids == hf_tokenizer.encode(text, add_special_tokens=False)
    assert tok.encode(text, add_special_tokens=True) == [2, *ids]
    assert tok.decode(ids, skip_special_tokens=False) == hf_tokenizer.decode(ids, skip_special_tokens=False)
    assert tok.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True)


def test_gemma_specials_and_template(gguf_path: Path) -> None:
    tok = gguf_tokenizer(read_gguf(gguf_path).metadata)
    assert (tok.bos_token_id, tok.eos_token_id, tok.add_bos_token) == (2, 1, True)
    assert tok.chat_stop_token_ids == (6,)  # <end_of_turn>
    assert tok.chat_template == GEMMA3_CHAT_TEMPLATE
    first_byte = [tok for tok, _ in _vocab()].index("<0x00>")
    assert tok.encode("ü") == [first_byte + 0xC3, first_byte + 0xBC]  # byte fallback, as UTF-8
    assert tok.decode(tok.encode("ü")) == "ü"


def test_other_sentencepiece_models_are_refused() -> None:
    with pytest.raises(ModelLoadError, match="unsupported GGUF tokenizer 'llama' for architecture 'llama'"):
        gguf_tokenizer({"tokenizer.ggml.model": "llama", "general.architecture": "llama"})
