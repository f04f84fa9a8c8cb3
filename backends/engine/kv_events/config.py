"""``--kv-events-config``: vLLM's JSON shape, parsed into a frozen config that builds the publisher."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

PUBLISHERS = ("zmq", "null")
"""vLLM's publisher names: "zmq" publishes, "null" records nothing."""


@dataclass(frozen=True)
class KVEventsConfig:
    """Whether and where the engine publishes its KV-cache events (vLLM's ``KVEventsConfig`` keys)."""

    enable_kv_cache_events: bool = False
    """Off: the block manager records nothing and no socket opens."""
    publisher: str | None = None
    """"zmq" or "null"; None: "zmq" when events are enabled, else "null" (as vLLM resolves it)."""
    endpoint: str = "tcp://*:5557"
    """The PUB socket: an address with ``*`` (or ipc://, inproc://) is bound, any other is connected to."""
    replay_endpoint: str | None = None
    """The ROUTER socket that replays missed batches (bound); None: no replay."""
    buffer_steps: int = 10_000
    """Batches (engine steps with events) kept for replay."""
    hwm: int = 100_000
    """ZeroMQ send high-water mark of the PUB socket: past it, slow subscribers lose messages."""
    max_queue_size: int = 100_000
    """Batches waiting for the publisher thread; past it the engine drops the step's batch (and counts
    it) rather than wait on the network."""
    topic: str = ""
    """The first frame of every message; subscribers filter on its prefix."""

    def __post_init__(self) -> None:
        if self.publisher is None:
            object.__setattr__(self, "publisher", "zmq" if self.enable_kv_cache_events else "null")
        if self.publisher not in PUBLISHERS:
            raise ValueError(
                f"unknown KV-event publisher {self.publisher!r}: expected one of {list(PUBLISHERS)}"
            )
        if self.buffer_steps < 1 or self.hwm < 0 or self.max_queue_size < 1:
            raise ValueError("buffer_steps and max_queue_size must be >= 1, hwm >= 0")
        if not self.endpoint:
            raise ValueError("the KV-event endpoint is empty")

    @property
    def is_enabled(self) -> bool:
        """Whether a publisher runs: events on and a real publisher."""
        return self.enable_kv_cache_events and self.publisher != "null"

    @classmethod
    def from_json(cls, text: str) -> KVEventsConfig:
        """Parse ``--kv-events-config``'s JSON object; unknown keys and wrong types are a ValueError."""
        try:
            raw: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--kv-events-config is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError("--kv-events-config must be a JSON object")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(f"--kv-events-config: unknown keys {unknown}; known: {sorted(known)}")
        for key, value in raw.items():
            if not _matches(known[key].type, value):
                raise ValueError(f"--kv-events-config: {key!r} has the wrong type ({value!r})")
        return cls(**raw)


def _matches(annotation: Any, value: Any) -> bool:
    """Whether a JSON value fits a field annotation (the annotations are strings: postponed)."""
    allowed = {"bool": (bool,), "int": (int,), "str": (str,)}
    for part in str(annotation).split("|"):
        name = part.strip()
        if name == "None" and value is None:
            return True
        types = allowed.get(name)
        # bool is an int in Python, never in a config
        if types is not None and isinstance(value, types) and (name == "bool" or not isinstance(value, bool)):
            return True
    return False
