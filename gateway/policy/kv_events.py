"""The policy of KV-cache-aware picks: the ``kv_routing:`` section (``gateway.kv_routing`` serves it).

::

    kv_routing:
      pools:
        large:
          tokenizer: /models/qwen3-8b          # tokenizer.json + tokenizer_config.json of the pool's model
          replicas:                            # replica label -> where its engine publishes KV events
            large-0: {endpoint: "tcp://10.0.0.5:5557", replay_endpoint: "tcp://10.0.0.5:5558"}
            large-1: {endpoint: "tcp://10.0.0.6:5557"}
          load_tokens: 256

A pool listed here whose replicas publish events is picked by the blocks each replica holds; any other
pool, or this one while no events flow, keeps prompt-prefix affinity (``cache.affinity``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

__all__ = ["KvEventSource", "KvRoutingConfig", "PoolKvRouting", "check_kv_routing", "endpoint_problem"]

_SCHEMES = ("tcp://", "ipc://", "inproc://")
_TCP = re.compile(r"^(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?\]):(?P<port>[0-9]{1,5})\Z")
_MAX_IPC_PATH = 107
"""A Unix socket's path is at most 107 bytes on Linux (``sun_path`` holds 108 with its NUL)."""


class KvEventSource(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where one replica's engine publishes its KV-cache events (vLLM's ``--kv-events-config``)."""

    endpoint: str
    """The engine's ZeroMQ PUB socket, e.g. ``tcp://10.0.0.5:5557`` (the gateway connects a SUB):
    ``tcp://HOST:PORT``, ``ipc://PATH`` or ``inproc://NAME`` (:func:`endpoint_problem`)."""
    replay_endpoint: str | None = None
    """The engine's ROUTER replay socket; without one a gap in the sequence forgets the replica's blocks
    until new events rebuild them."""
    topic: str = ""
    """The topic the engine publishes on (vLLM's ``topic``; empty: all)."""


class PoolKvRouting(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """KV-cache-aware picks for one pool (``kv_routing.pools.<name>``)."""

    tokenizer: str
    """A directory with the pool model's ``tokenizer.json`` (and ``tokenizer_config.json`` for its chat
    template), so the gateway's token ids are the ones the engine prefills."""
    replicas: dict[str, KvEventSource]
    """Replica label -> its event source (at least one while ``enabled``). Replicas not listed score no
    cached blocks."""
    enabled: bool = True
    """Off: the pool keeps prompt-prefix affinity, and no socket is opened."""
    load_tokens: Annotated[float, msgspec.Meta(ge=0)] = 256
    """What one request in flight on a replica weighs, in prompt tokens held: at 256, a replica holding
    only a 200-token system prompt loses a new conversation to one with a request less in flight, while one
    holding a conversation's 1,000-token history keeps its next turn through 3 more requests than another.
    0: blocks alone decide (``max_load_factor`` still bounds the load)."""
    max_load_factor: Annotated[float, msgspec.Meta(ge=1)] = 1.5
    """A replica whose load is above the pool's mean by this factor...."""
    min_load_excess: Annotated[float, msgspec.Meta(ge=0)] = 4.0
    """...and by at least this many requests is never chosen, however many blocks it holds."""
    max_blocks_per_replica: Annotated[int, msgspec.Meta(ge=1)] = 65_536
    """The most blocks remembered per replica (least recently stored forgotten first): bounds memory at
    a few hundred bytes a block. Set it to at least the engine's number of GPU
    blocks, so the engine's own removals do the evicting."""
    max_prefix_tokens: Annotated[int, msgspec.Meta(ge=1)] = 4096
    """Only the prompt's first this many tokens are tokenized and looked up (bounds the hot path: past
    a few thousand shared tokens the replicas rarely differ)."""
    stale_after_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    """A replica whose events stopped this long is forgotten (its blocks no longer steer picks)."""
    replay_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """How long a replay request may take before the gap counts as unfillable."""


class KvRoutingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """KV-cache-aware replica picks, per pool (none by default)."""

    pools: dict[str, PoolKvRouting] = {}
    """Pool name -> its event sources and scoring."""


def check_kv_routing(
    config: KvRoutingConfig, pools: Mapping[str, Any], embedding_pool: str | None = None
) -> list[str]:
    """What is wrong with ``config`` for a policy with these pools (name -> Pool); empty if fine.

    ``embedding_pool``: the pool the semantic cache embeds prompts with (``cache.semantic.pool``, when
    on), which serves no chat prompt to steer.
    """
    problems: list[str] = []
    for name, pool_config in config.pools.items():
        where = f"kv_routing.pools.{name}"
        if name not in pools:
            problems.append(f"{where}: unknown pool (pools are {', '.join(pools)})")
            continue
        if name == embedding_pool:
            problems.append(
                f"{where}: the semantic cache's embedding pool (cache.semantic.pool) has no chat prompts"
            )
        if pool_config.enabled and not pool_config.replicas:
            problems.append(
                f"{where}.replicas: expected at least one replica's event source (or enabled: false)"
            )
        labels = {replica.label for replica in getattr(pools[name], "replicas", ())}
        for label, source in pool_config.replicas.items():
            if label not in labels:
                problems.append(
                    f"{where}.replicas.{label}: unknown replica (labels are {', '.join(sorted(labels))})"
                )
            for field in ("endpoint", "replay_endpoint"):
                value = getattr(source, field)
                problem = endpoint_problem(value) if value is not None else None
                if problem is not None:
                    problems.append(f"{where}.replicas.{label}.{field}: {problem}")
    return problems


def endpoint_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` is no address the gateway can connect a ZeroMQ socket to, or None when it is one:
    ``tcp://HOST:PORT`` (a name, an IPv4 address or a bracketed IPv6 one; a port from 1 to 65535),
    ``ipc://PATH`` or ``inproc://NAME``. zmq itself refuses the rest only once the subscriber starts,
    in a log line, with events never flowing."""
    if not endpoint.startswith(_SCHEMES):
        return f"expected a tcp://, ipc:// or inproc:// address, got {endpoint!r}"
    if "*" in endpoint:
        return f"expected the engine's host and port, got {endpoint!r} (a `*` is what the engine binds)"
    scheme, _, rest = endpoint.partition("://")
    if scheme == "tcp":
        match = _TCP.match(rest)
        if match is None or not 1 <= int(match.group("port")) <= 65535:
            return f"expected tcp://HOST:PORT (IPv6 in brackets, a port from 1 to 65535), got {endpoint!r}"
    elif not rest or not rest.isprintable():
        return f"expected {scheme}://{'PATH' if scheme == 'ipc' else 'NAME'}, got {endpoint!r}"
    elif scheme == "ipc" and len(rest.encode()) > _MAX_IPC_PATH:
        return f"an ipc:// path is at most {_MAX_IPC_PATH} bytes (a Unix socket's), got {len(rest.encode())}"
    return None
