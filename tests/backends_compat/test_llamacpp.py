"""The compatibility scenarios against real llama.cpp servers (``kind: llamacpp``).

Three llama.cpp servers (``tests.support.llamacpp_server``: llama.cpp's own server run by the
``xllamacpp`` wheel, SmolLM2-135M-Instruct, one thread and one slot each): the ``llamacpp`` pool's
replica is the first, behind a ``CutProxy`` that can kill its connections mid-stream; the
``llamacpp-pair`` pool is the other two, balanced ``load_aware`` on their ``/slots`` pages. The
busy replica runs a long generation sent to it directly, not through the gateway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from gateway.replicas.state import ReplicaState
from tests.backends_compat.scenarios import CompatScenarios, Target, compat_policy, wait_until
from tests.support.cut_proxy import CutProxy
from tests.support.llamacpp_server import LlamaCppServer, unavailable
from tools.servers.gateway_server import GatewayServer, write_policy

pytestmark = pytest.mark.slow

_REASON = unavailable()
if _REASON is not None:
    pytest.skip(f"no llama.cpp server here: {_REASON}", allow_module_level=True)

N_CTX = 2048
_LONG_MESSAGE = "word " * 3000  # > N_CTX tokens: llama.cpp answers 400 exceed_context_size_error
_BUSY_TOKENS = 64
"""The busy replica counts as loaded once it holds this many tokens: more than one of the scenario's
requests holds (a 37-token chat prompt and 2 tokens), so the other replica's load, scraped while it
serves one, stays below it."""


class _Busy:
    """A long generation streamed straight from one server until ``stop()``."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.started = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="llamacpp-busy")

    def _run(self) -> None:
        body = {"prompt": "Tell me a long story.", "n_predict": 1500, "ignore_eos": True, "stream": True}
        try:
            with (
                httpx.Client(timeout=60) as client,
                client.stream("POST", self.origin + "/completion", json=body) as response,
            ):
                response.raise_for_status()
                for _ in response.iter_lines():
                    self.started.set()
                    if self._stop.is_set():
                        break  # leaving closes the connection: llama.cpp cancels the generation
        except BaseException as error:  # reported by stop()
            self.error = error
        finally:
            self.started.set()

    def start(self) -> _Busy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="module")
def llamacpp_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    servers = [LlamaCppServer(n_ctx=N_CTX, n_parallel=1, threads=1) for _ in range(3)]
    proxy: CutProxy | None = None
    gateway: GatewayServer | None = None
    try:
        for server in servers:
            server.launch()
        for server in servers:
            server.wait_ready()
        proxy = CutProxy(servers[0].port).start()
        policy = compat_policy(
            "llamacpp", proxy.origin, (servers[1].origin, servers[2].origin), model="smollm2-135m"
        )
        # every scenario must reach a server: identical greedy requests would be answered from the cache
        policy["cache"] = {"response": {"enabled": False}}
        path = write_policy(tmp_path_factory.mktemp("llamacpp") / "policy.yaml", policy)
        gateway = GatewayServer(path).start()
        balancer = gateway.gateway.balancer

        def pair() -> tuple[ReplicaState, ...]:
            return tuple(balancer.replicas("llamacpp-pair"))

        @contextmanager
        def make_busy() -> Iterator[Callable[[], bool]]:
            busy = _Busy(servers[1].origin).start()

            def weighed() -> bool:
                first = pair()[0]
                return (
                    first.num_running > 0
                    and first.kv_cache_usage * N_CTX > _BUSY_TOKENS
                    and first.load_fresh_until > balancer.clock()
                )

            try:
                wait_until(weighed, what="the gateway to scrape the busy replica")
                yield weighed
            finally:
                busy.stop()
            wait_until(lambda: pair()[0].num_running == 0, what="the busy replica to be idle again")

        yield Target(
            kind="llamacpp",
            gateway_url=gateway.url,
            cut=proxy.cut,
            cut_request={"max_tokens": 200, "extra_body": {"ignore_eos": True}},
            rejected={"messages": [{"role": "user", "content": _LONG_MESSAGE}]},
            rejected_status=400,
            make_busy=make_busy,
            served=lambda: (pair()[0].num_requests, pair()[1].num_requests),
        )
    finally:
        if gateway is not None:
            gateway.stop()
        if proxy is not None:
            proxy.stop()
        for server in servers:
            server.stop()


class TestLlamaCpp(CompatScenarios):
    @pytest.fixture
    def target(self, llamacpp_target: Target) -> Iterator[Target]:
        yield llamacpp_target
