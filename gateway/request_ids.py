"""Ids the gateway makes for what must never repeat, whatever id the client sent.

A client's ``x-request-id`` names its request in the gateway's logs, traces and response header, but
clients repeat ids (a retry loop, a constant header in a proxy), so it can name nothing that must be
unique: an upstream attempt (vLLM makes the completion's id from it and may refuse an id already in
flight) or a request in the limits store (leases and the settled-once mark are keyed by it). Those get
an id from ``RequestIds``: 48 random bits per process, then a counter, in hex (a uuid4 costs more and
says less).
"""

from __future__ import annotations

import itertools
import os

__all__ = ["RequestIds"]


class RequestIds:
    """Unique ids for one process: ``next_id()`` never repeats here, nor (but by a 1-in-2**48 chance)
    in another process."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix if prefix is not None else os.urandom(6).hex()
        self._counter = itertools.count(1)

    def next_id(self) -> str:
        return f"{self.prefix}{next(self._counter):x}"

    def for_upstream(self, request_id: str) -> str:
        """An upstream attempt's ``X-Request-Id``: the client's id (so the backend's logs still name it),
        then a unique part (so two attempts, or two requests with one id, never share one)."""
        return f"{request_id}-{self.next_id()}"
