"""Shared fixtures: a real Redis for the whole session, flushed per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.durations import ROOT, load_durations
from tools.servers.redis_server import RedisServer, find_redis_binary, real_redis


def _share_the_cores() -> None:
    """Under pytest-xdist, each worker's torch (and the engines and benches it starts) takes its share
    of the cores, not all of them: OpenMP threads that outnumber the cores spin against each other, and
    a run of seconds alone takes minutes beside three other workers. Set before anything imports torch."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // workers))


_share_the_cores()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis server (see tools/servers/redis_server.py for how it is found)."""
    with real_redis() as (url, _server):
        yield url


@pytest.fixture
def redis_flushed(redis_url: str) -> Iterator[str]:
    """The session's Redis, emptied before the test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    yield redis_url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis process this test owns, so it may stop and restart it."""
    binary = find_redis_binary()
    if binary is None:
        pytest.skip("no redis-server binary")
    server = RedisServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.stop()


ONE_WORKER = {
    "tests/deploy/test_images.py": "tests/deploy (one Docker engine)",
    "tests/deploy/test_compose.py": "tests/deploy (one Docker engine)",
}
"""Files that must share a pytest-xdist worker: both start dockerd for the session (and stop it at its
end) and build the same images; in two workers they would build twice and stop each other's engine."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the files of ``ONE_WORKER`` handed out as one unit."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = str(super()._split_scope(nodeid))
            return ONE_WORKER.get(path, path)

    return SharedFileScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, each file's tests kept together and in order.

    ``make test`` hands whole files to pytest-xdist's workers in collection order (``--dist loadfile``):
    the long files (real models, images, real servers) must start first, or one of them begins last and
    the suite waits for it alone. Files are ordered by ``tests/durations.json`` (longest first), then
    files with ``slow`` tests it does not list, then the rest in their own order. A file's tests stay
    contiguous, so module fixtures are made once.
    """
    seconds = load_durations()
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> tuple[int, float]:
        known = (
            seconds.get(item.path.relative_to(ROOT).as_posix()) if item.path.is_relative_to(ROOT) else None
        )
        if known is not None:
            return 0, -known
        return (1, 0.0) if item.path in slow_files else (2, 0.0)

    items.sort(key=rank)  # stable: the order within a file, and among equals, stays
