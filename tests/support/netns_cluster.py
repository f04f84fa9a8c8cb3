"""Redis, an engine and two gateways, each on a host of its own: network namespaces on one bridge
(tests/support/netns.py), for the tests that cut a gateway off from Redis
(tests/reliability/test_partition.py).

``running_cluster`` starts ``redis`` (a real redis-server bound to its address), ``engine`` (the fake
upstream) and ``gw1`` and ``gw2`` (``python -m gateway serve``, one policy, ``SORTYARD_REDIS_URL``
pointing at ``redis``), waits until each answers and yields a ``Cluster``. The test process is the
client, from the bridge.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from tests.support.netns import Network, unavailable_reason
from tools.servers.redis_server import find_redis_binary

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("redis", "engine", "gw1", "gw2")
GATEWAY_PORT = 8000
ENGINE_PORT = 8001


@dataclass
class Cluster:
    net: Network
    gw1: str
    gw2: str
    raw: redis.Redis
    logs: dict[str, Path] = field(default_factory=dict)

    def log_tails(self) -> str:
        return "\n".join(f"--- {name}:\n{path.read_text()[-3000:]}" for name, path in self.logs.items())


def skip_reason() -> str | None:
    """Why the cluster cannot run here (a skip reason: no namespaces, no redis-server), or None."""
    reason = unavailable_reason()
    if reason is None and find_redis_binary() is None:
        return "no redis-server binary"
    return reason


def engine_main(host: str, port: int) -> None:
    """In the engine namespace: the fake upstream's app on the host's address."""
    from aiohttp import web

    from tools.servers.fake_upstream import FakeUpstream

    web.run_app(FakeUpstream(port)._app(), host=host, port=port, print=None)


def wait_for(
    predicate: Callable[[], bool], what: str, timeout_s: float = 30.0, every_s: float = 0.02
) -> float:
    """Poll until ``predicate()``; the seconds it took."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, f"never happened within {timeout_s} s: {what}"
        time.sleep(every_s)
    return time.monotonic() - started


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _pings(raw: redis.Redis) -> bool:
    try:
        return bool(raw.ping())
    except redis.RedisError:
        return False


@contextmanager
def running_cluster(tmp_path: Path, policy: Callable[[str], Path]) -> Iterator[Cluster]:
    """The four hosts, each process started and answering; ``policy(engine_url)`` writes the gateways'
    policy and returns its path. Every process's log tail is printed when the start fails."""
    binary = find_redis_binary()
    assert binary is not None
    with Network(list(HOSTS)) as net:
        raw = redis.Redis(host=net.address("redis"), port=6379, socket_timeout=5, decode_responses=True)
        logs = {name: tmp_path / f"{name}.log" for name in HOSTS}

        def start(name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
            with logs[name].open("wb") as log:
                net.popen(name, argv, env=env, cwd=REPO, stdout=log, stderr=log)

        try:
            redis_dir = tmp_path / "redis"
            redis_dir.mkdir()
            start(
                "redis",
                [binary, "--bind", net.address("redis"), "--port", "6379", "--save", "", "--appendonly", "no",
                 "--protected-mode", "no", "--dir", str(redis_dir)],
            )  # fmt: skip
            engine = net.address("engine")
            code = (
                f"from tests.support.netns_cluster import engine_main; engine_main({engine!r}, {ENGINE_PORT})"
            )
            start("engine", [sys.executable, "-c", code])
            policy_path = policy(f"http://{engine}:{ENGINE_PORT}/v1")
            env = {
                **_environ(),
                "SORTYARD_REDIS_URL": f"redis://{net.address('redis')}:6379/0",
                "SORTYARD_CACHE_SALT_SECRET": "partition-test",
            }
            for name in ("gw1", "gw2"):
                start(
                    name,
                    [sys.executable, "-m", "gateway", "serve", "--policy", str(policy_path),
                     "--host", net.address(name), "--port", str(GATEWAY_PORT), "--log-level", "warning"],
                    env,
                )  # fmt: skip
            gw1, gw2 = (f"http://{net.address(name)}:{GATEWAY_PORT}" for name in ("gw1", "gw2"))
            cluster = Cluster(net, gw1, gw2, raw, logs)
            wait_for(lambda: _pings(raw), "redis answered", 20)
            wait_for(lambda: _answers(f"http://{engine}:{ENGINE_PORT}/health"), "the engine answered", 60)
            for url in (gw1, gw2):
                wait_for(lambda url=url: _answers(url + "/readyz"), f"{url} ready", 60)  # type: ignore[misc]
            yield cluster
        except BaseException:
            print(Cluster(net, "", "", raw, logs).log_tails())
            raise
        finally:
            raw.close()


def _environ() -> dict[str, str]:
    # the gateways take their settings from SORTYARD_* variables: none of this process's may leak in
    return {name: value for name, value in os.environ.items() if not name.startswith("SORTYARD_")}
