"""A GGUF file read for loading: metadata as plain Python values, tensors as views of one memory map.

``gguf.GGUFReader`` builds a numpy view for every element of every metadata array, which takes ~20 s on
Gemma 3's 262,144-token vocabulary (three such arrays). This reader decodes a numeric array with one
``np.frombuffer`` and a string array in one pass, and leaves tensor bytes mapped until each is
dequantised (in row chunks, so a large quantised tensor never has several float copies alive at once).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize

from backends.engine.errors import ModelLoadError

MAGIC = b"GGUF"
DEQUANT_CHUNK_ELEMENTS = 1 << 22
"""Elements dequantised at a time (16 MiB of float32): bounds the temporaries gguf's numpy code makes."""

_SCALARS = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor's raw bytes; ``shape`` is numpy's order (the reverse of GGUF's), rows first."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray
    """uint8 view of the file's bytes, [rows, bytes per row]."""

    def dequantize(self) -> np.ndarray:
        """float32 C-contiguous, writable array of ``shape``."""
        rows = self.data.shape[0]
        out = np.empty((rows, self.shape[-1]), dtype=np.float32)
        step = max(1, DEQUANT_CHUNK_ELEMENTS // max(1, self.shape[-1]))
        for start in range(0, rows, step):
            out[start : start + step] = dequantize(self.data[start : start + step], self.qtype)
        return out.reshape(self.shape)


@dataclass(frozen=True)
class GGUFFile:
    metadata: dict[str, Any]
    """Every key-value pair (``general.architecture``, ``tokenizer.ggml.tokens``...) as str, int,
    float, bool or lists of them."""
    tensors: list[GGUFTensor]


def read_gguf(path: str | Path) -> GGUFFile:
    """Parse the header, metadata and tensor table of a little-endian GGUF (version 2 or 3)."""
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    reader = _Cursor(buf, str(path))
    if reader.take(4) != MAGIC:
        raise ModelLoadError(f"{path}: not a GGUF file")
    version = reader.scalar("I")
    if version not in (2, 3):
        raise ModelLoadError(f"{path}: unsupported GGUF version {version} (big-endian files are not read)")
    num_tensors, num_fields = reader.scalar("Q"), reader.scalar("Q")
    metadata: dict[str, Any] = {}
    for _ in range(num_fields):
        key = reader.string()
        metadata[key] = reader.value(GGUFValueType(reader.scalar("I")))
    infos = []
    for _ in range(num_tensors):
        name = reader.string()
        dims = [reader.scalar("Q") for _ in range(reader.scalar("I"))]
        infos.append((name, GGMLQuantizationType(reader.scalar("I")), dims, reader.scalar("Q")))
    alignment = int(metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT))
    data_start = -(-reader.offset // alignment) * alignment
    tensors = []
    for name, qtype, dims, offset in infos:
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        shape = tuple(int(d) for d in reversed(dims))
        row_bytes = shape[-1] // block_size * type_size
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        raw = np.frombuffer(buf, dtype=np.uint8, count=rows * row_bytes, offset=data_start + offset)
        tensors.append(GGUFTensor(name, qtype, shape, raw.reshape(rows, row_bytes)))
    return GGUFFile(metadata, tensors)


class _Cursor:
    """Sequential little-endian reads over the mapped file."""

    def __init__(self, buf: mmap.mmap, path: str) -> None:
        self.buf, self.path, self.offset = buf, path, 0

    def take(self, n: int) -> bytes:
        if self.offset + n > len(self.buf):
            raise ModelLoadError(f"{self.path}: truncated GGUF file")
        chunk = self.buf[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.take(struct.calcsize(fmt)))
        return value

    def string(self) -> str:
        return self.take(self.scalar("Q")).decode("utf-8")

    def value(self, kind: GGUFValueType) -> Any:
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind == GGUFValueType.ARRAY:
            item_kind, count = GGUFValueType(self.scalar("I")), self.scalar("Q")
            fmt = _SCALARS.get(item_kind)
            if fmt is None:  # strings (and nested arrays) one by one
                return [self.value(item_kind) for _ in range(count)]
            items = np.frombuffer(self.take(count * struct.calcsize(fmt)), dtype="<" + fmt)
            return items.tolist()
        return self.scalar(_SCALARS[kind])
