"""The engine's quality probes, shared by its slow tests and the quality benchmarks: a fixed English text
(chapter 1 of *Pride and Prejudice*, public domain) read in chunks through the KV cache, and reference chat
prompts whose greedy answers are compared.

``chunked_perplexity`` feeds the text ``CHUNK`` tokens at a time, so every chunk after the first reads its
context back from the (possibly quantized) cache: a KV-cache dtype's loss of precision shows in it.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from backends.engine.layers.attention import AttentionMetadata, PrefillChunk
from backends.engine.llm_engine import LLMEngine

TEXT = Path(__file__).parent / "data" / "pride_and_prejudice_ch1.txt"
"""Pride and Prejudice, chapter 1: 1,157 SmolLM2 tokens."""

CHUNK = 64

MESSAGES = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Count: 1, 2, 3,"}],
]
"""The chats SmolLM2's answers are checked on (test_smollm2.py)."""
PROMPTS = [
    *MESSAGES,
    [{"role": "user", "content": "Write a short poem about the sea."}],
    [{"role": "user", "content": "Explain what a hash table is."}],
    [{"role": "user", "content": "Give three tips for learning a language."}],
]
"""The chats whose greedy tokens a quantized cache or dtype is compared on."""


def chunked_perplexity(engine: LLMEngine, token_ids: list[int]) -> float:
    """exp(mean next-token NLL), the text fed ``CHUNK`` tokens at a time at slots equal to positions:
    each chunk after the first reads its keys and values back from the cache."""
    n = len(token_ids)
    model = engine.runner.model
    logits = []
    with torch.inference_mode():
        for start in range(0, n, CHUNK):
            end = min(start + CHUNK, n)
            meta = AttentionMetadata(
                slot_mapping=torch.arange(start, end), block_size=engine.config.block_size
            )
            if start == 0:
                meta.prefills.append(PrefillChunk(0, end, 0, None))
            else:
                mask = torch.arange(end).unsqueeze(0) <= torch.arange(start, end).unsqueeze(1)
                meta.prefills.append(PrefillChunk(0, end - start, start, torch.arange(end), mask))
            hidden = model(torch.tensor(token_ids[start:end]), torch.arange(start, end), meta)
            logits.append(model.compute_logits(hidden).float())
    nll = torch.nn.functional.cross_entropy(torch.cat(logits)[:-1], torch.tensor(token_ids[1:]))
    return math.exp(nll.item())
