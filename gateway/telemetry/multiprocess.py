"""Metrics across several worker processes (``sortyard serve --workers N``): prometheus_client's
multiprocess mode.

The parent calls :func:`prepare_multiprocess` (an empty directory in ``PROMETHEUS_MULTIPROC_DIR``)
before any worker starts, so that each worker's prometheus_client keeps its values in memory-mapped
files there, and ``Metrics.render()`` (``gateway.telemetry.metrics``) answers with the sum over all
workers (``MultiProcessCollector``): whichever worker a scrape reaches, the counts are the whole
server's. Replica gauges are written by the worker that serves a scrape and summed (``livesum``) or
maxed (``livemax``) over live workers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["MULTIPROC_ENV", "is_multiprocess", "prepare_multiprocess"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_multiprocess(directory: str | os.PathLike[str]) -> Path:
    """Multi-worker metrics: empty ``directory`` (a previous run's files would add up) and export it as
    ``PROMETHEUS_MULTIPROC_DIR``. Call it in the parent before the workers start (prometheus_client
    picks its value class when it is first imported, in each worker)."""
    path = Path(directory)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def is_multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))
