"""A fake upstream for the semantic-cache tests: a toy embedding of meaning, and a chat that echoes.

The toy embedding hashes the content words of a text (stop words dropped, synonyms folded) into 64
dimensions, so paraphrases built from the same content words embed identically, and a question about
another subject lands far away. Chat answers name the question they answered, so a test can tell
which prompt an answer came from; a ``max_tokens`` under 10 cuts the answer (``finish_reason``
``length``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from tests.support.calls import chat_chunk, chat_completion, policy_doc

NDIM = 64
STOP_WORDS = frozenset("what is the of tell me please which a an to in do you know could can".split())
SYNONYMS = {
    "capital": "capital",
    "capitol": "capital",
    "city": "capital",
    "nation's": "",
    "france's": "france",
}


def toy_vector(text: str) -> list[float]:
    """A unit vector: the sum of one hashed axis per content word."""
    vector = np.zeros(NDIM, dtype=np.float32)
    for word in re.findall(r"[\w']+", text.lower()):
        word = SYNONYMS.get(word, word)
        if word and word not in STOP_WORDS:
            axis = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=2).digest()) % NDIM
            vector[axis] += 1.0
    norm = float(np.linalg.norm(vector)) or 1.0
    return (vector / norm).tolist()


class FakeUpstream:
    """Answers ``/embeddings`` with toy vectors and chat with ``answer to: <last user turn>``."""

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self.asked: list[str] = []
        self.client = MemoryUpstreamClient(self.handle)

    def handle(self, url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        request: dict[str, Any] = msgspec.json.decode(body)
        if url.endswith("/embeddings"):
            text = request["input"]
            self.embedded.append(text)
            data = [{"object": "embedding", "index": 0, "embedding": toy_vector(text)}]
            return Reply.json({"object": "list", "data": data, "model": request["model"]})
        question = request["messages"][-1]["content"]
        self.asked.append(question)
        answer = f"answer to: {question}"
        if request.get("stream"):
            return Reply.sse(
                chat_chunk(request["model"], answer),
                chat_chunk(request["model"], finish="stop"),
                chat_chunk(request["model"], usage=(5, 3)),
            )
        completion = chat_completion(request["model"], answer)
        if request.get("max_tokens") is not None and request["max_tokens"] < 10:
            completion["choices"][0]["message"]["content"] = answer[:5]
            completion["choices"][0]["finish_reason"] = "length"
        return Reply.json(completion)


def semantic_policy(**semantic: Any) -> dict[str, Any]:
    """A policy document: chat pools ``small`` and ``large``, embedding pool ``embed``, the semantic
    cache on."""
    config = {"enabled": True, "pool": "embed", "threshold": 0.9, **semantic}
    return policy_doc("small", "large", "embed", cache={"semantic": config})
