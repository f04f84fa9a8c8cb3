"""One model loads at a time in an engine process.

transformers resolves its names lazily on first use, and two threads resolving them at once can see
the package half-initialised ("cannot import name 'PreTrainedTokenizerBase' from 'transformers'"):
the chat engine (loaded in a thread at start-up) and the embedding model (loaded in another thread,
at start-up with ``--embedding-model minilm`` or on the first ``/v1/embeddings`` request) must not
load together. Loading two models at once would only split the CPU and double the peak memory anyway.
"""

from __future__ import annotations

import threading

LOADING = threading.Lock()
"""Held while a model's weights and tokenizer load."""
