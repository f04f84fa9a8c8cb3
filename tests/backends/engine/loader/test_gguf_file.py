"""The GGUF reader against gguf's own GGUFReader on a small file written with GGUFWriter: the same
metadata, and the same dequantised tensors for every type Gemma 3 270M uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from backends.engine.errors import ModelLoadError
from backends.engine.loader import gguf_file
from backends.engine.loader.gguf_file import read_gguf

TYPES = [
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.Q5_0,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q6_K,
]


@pytest.fixture
def gguf_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    writer = GGUFWriter(path, "gemma3")
    writer.add_uint32("gemma3.block_count", 2)
    writer.add_float32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_string("general.name", "tiny ünïcode")
    writer.add_array("tokenizer.ggml.tokens", ["<pad>", "  ", "▁a", "東京", "\n"])
    writer.add_array("tokenizer.ggml.scores", [-1000.0, 0.5, -1.25, 3.0, 0.0])
    writer.add_array("tokenizer.ggml.token_type", [3, 4, 1, 1, 4])
    rng = np.random.default_rng(0)
    for qtype in TYPES:
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        rows, cols = 7, 2 * 256  # whole blocks of every type, K-quants included
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            dtype = np.float32 if qtype == GGMLQuantizationType.F32 else np.float16
            writer.add_tensor(f"t.{qtype.name}", rng.standard_normal((rows, cols)).astype(dtype))
            continue
        # random bytes are valid blocks of any type (scales may be inf or nan: compared as such)
        raw = rng.integers(0, 256, (rows, cols // block_size * type_size), dtype=np.uint8)
        writer.add_tensor(f"t.{qtype.name}", raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_metadata_matches_gguf_reader(gguf_path: Path) -> None:
    ours = read_gguf(gguf_path).metadata
    reader = GGUFReader(str(gguf_path))
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert ours == theirs
    assert ours["tokenizer.ggml.tokens"][3] == "東京" and ours["tokenizer.ggml.add_bos_token"] is True


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf scales times zero
def test_tensors_match_gguf_reader(gguf_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_file, "DEQUANT_CHUNK_ELEMENTS", 2 * 512)  # several chunks per tensor
    ours = read_gguf(gguf_path).tensors
    theirs = GGUFReader(str(gguf_path)).tensors
    assert [t.name for t in ours] == [t.name for t in theirs]
    for mine, ref in zip(ours, theirs, strict=True):
        expected = dequantize(ref.data, ref.tensor_type).reshape([int(d) for d in reversed(ref.shape)])
        got = mine.dequantize()
        assert mine.qtype == ref.tensor_type and got.shape == mine.shape == (7, 512)
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, expected)


def test_not_a_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_gguf(path)
