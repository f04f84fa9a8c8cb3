"""Load a Hugging Face directory: config.json, tokenizer files and *.safetensors shards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from backends.engine.errors import ModelLoadError
from backends.engine.loader import LoadedModel
from backends.engine.model_config import ModelConfig
from backends.engine.tokenizer import Tokenizer


def load_hf_dir(path: str | Path, *, served_name: str) -> LoadedModel:
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.exists():
        raise ModelLoadError(f"{path} has no config.json")
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise ModelLoadError(f"{path} has no *.safetensors files")
    cfg = ModelConfig.from_hf(json.loads(config_file.read_text()))
    return LoadedModel(cfg, Tokenizer.from_hf_dir(path), _iter_tensors(shards), served_name)


def _iter_tensors(shards: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    for shard in shards:
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
