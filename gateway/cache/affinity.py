"""Prompt-prefix affinity: hash a prompt's prefix in chained chunks, and choose a replica with it.

An engine with a prefix cache (vLLM's automatic prefix caching, the reference engine's block
hashing) answers much sooner when it already holds a prompt's leading tokens. The gateway cannot
see tokens or KV blocks, so it works on the canonical prompt bytes instead:

- :func:`prefix_chain` encodes the prompt (tools, then every message, as sorted-key JSON; a Responses
  request's tools, instructions and input the same way; or the text-completion prompt), cuts it
  into ``chunk_bytes`` pieces and chains their hashes, ``h_i = SHA-256(h_{i-1} || chunk_i)``
  truncated to 128 bits (SHA-256 rather than BLAKE2b: with the CPU's SHA extensions it hashes a
  4k-token prompt in half the time); so ``h_i`` names the
  whole prefix up to chunk ``i``, and two prompts share ``h_0..h_k`` exactly when they share their
  first ``k+1`` chunks. The last user turn is hashed too: the replica that served ``[system, u1]``
  holds ``u1`` in its cache, which the next turn ``[system, u1, a1, u2]`` reuses. Only whole chunks
  count.
- The affinity map (``gateway.cache.affinity_map``) remembers which replica last served each chain
  hash; a lookup finds the longest recorded prefix in one round trip.
- :func:`choose_replica` prefers that replica unless it is overloaded (its load above the pool's
  average by ``max_load_factor`` and by at least ``min_load_excess``), in which case the least
  loaded replica wins; recording the choice afterwards moves the mapping to it.
- :func:`cache_salt` gives each tenant an unguessable salt for the engine's prefix cache, so cached
  KV blocks are never shared across tenants (and no timing probe can tell a tenant what another's
  prompts were).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

Reason = Literal["affinity", "override", "no_affinity"]
EVENT_OF_REASON: dict[str, str] = {
    "affinity": "affinity_hit",
    "override": "affinity_override",
    "no_affinity": "affinity_miss",
}
"""The metric event of each :func:`choose_replica` reason."""

_encode_sorted = msgspec.json.Encoder(order="sorted").encode
_sha256 = hashlib.sha256


def prompt_bytes(body: Mapping[str, Any]) -> bytes:
    """The canonical bytes of a request's prompt: tools then messages (chat), or the prompt (text)."""
    messages = body.get("messages")
    if messages is not None:
        tools = body.get("tools")
        head = _encode_sorted(tools) if tools else b""
        return head + _encode_sorted(messages)
    if "input" in body or "instructions" in body:  # the Responses API (embeddings never get here)
        tools = body.get("tools")
        head = _encode_sorted(tools) if tools else b""
        return head + _encode_sorted([body.get("instructions"), body.get("input")])
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt.encode()
    return _encode_sorted(prompt) if prompt is not None else b""


def prefix_chain(body: Mapping[str, Any], *, chunk_bytes: int = 1024, max_chunks: int = 64) -> list[str]:
    """The chained hashes of the prompt's whole chunks (at most ``max_chunks``), hex, in order."""
    data = prompt_bytes(body)
    num_chunks = min(len(data) // chunk_bytes, max_chunks)
    chain = []
    previous = b""
    view = memoryview(data)
    for i in range(num_chunks):
        digest = _sha256(previous)
        digest.update(view[i * chunk_bytes : (i + 1) * chunk_bytes])
        previous = digest.digest()[:16]
        chain.append(previous.hex())
    return chain


def choose_replica(
    candidates: Sequence[tuple[str, float]],
    preferred_label: str | None,
    max_load_factor: float,
    min_load_excess: float = 1.0,
) -> tuple[str, Reason]:
    """Pick a replica label from ``(label, load)`` pairs (load: outstanding requests).

    - ``affinity``: the preferred replica (it holds the longest prefix) is not overloaded;
    - ``override``: it is overloaded, so the least-loaded replica wins (the mapping should move);
    - ``no_affinity``: there is no preferred replica among the candidates; the least-loaded wins.

    Ties among least-loaded replicas go to the earliest candidate.
    """
    if not candidates:
        raise ValueError("choose_replica needs at least one candidate")
    least_label = min(candidates, key=lambda c: c[1])[0]
    if preferred_label is None:
        return least_label, "no_affinity"
    for label, load in candidates:
        if label == preferred_label:
            average = sum(c[1] for c in candidates) / len(candidates)
            if load > average * max_load_factor and load >= average + min_load_excess:
                return least_label, "override"
            return label, "affinity"
    return least_label, "no_affinity"


def cache_salt(tenant: str, secret: bytes | str) -> str:
    """The tenant's prefix-cache salt: HMAC-SHA256(secret, tenant), 128 bits as hex.

    The same on every gateway replica that shares ``secret``; unguessable without it.
    """
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, tenant.encode(), hashlib.sha256).hexdigest()[:32]
