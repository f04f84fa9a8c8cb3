"""The admin drain of one gateway instance, shared by its worker processes through a file.

``POST /v1/admin/drain`` lands on one worker of a ``--workers N`` gateway, while the load balancer's
readiness probes land on any of them: a drain kept in the answering process alone would fail 1 probe
in N, and the instance would never leave the balancer. So the answering worker also writes a mark
file that every worker's ``/readyz`` looks at (one ``stat`` a probe), and ``DELETE`` removes it.
``gateway serve --workers N`` makes the file's directory for the instance and names it to its
workers in ``SORTYARD_DRAIN_FILE``; a single process has no file and keeps its drain to itself.
SIGTERM needs no mark: the supervisor passes it to every worker.
"""

from __future__ import annotations

import os
from pathlib import Path


class DrainMark:
    """The mark file at ``path`` (None: no other process to tell; every call is a no-op)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def is_set(self) -> bool:
        return self.path is not None and self.path.exists()

    def set(self) -> None:
        if self.path is not None:
            self.path.touch()

    def clear(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
