"""A real gateway on a loopback port, run by uvicorn in a background thread.

Work a request does after its response is sent (settles, cache stores, prefix maps, metrics) races
the client's next step: a test that asserts on it calls ``settle()`` first, which waits for exactly
that work (``Gateway.settle`` on the server's own loop), never for a guessed time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
import uvloop
import yaml

from gateway.app import create_app
from gateway.compiled import compile_policy
from gateway.http_protocol import guarded_protocol
from gateway.settings import Settings
from gateway.stores.base import StoreUnavailable
from tools.servers.redis_server import free_port


def write_policy(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def fake_policy(base_url: str, **extra: Any) -> dict[str, Any]:
    """A policy whose pools play the fake upstream's behaviours (see fake_upstream.py)."""

    def pool(model: str) -> dict[str, Any]:
        return {"replicas": [{"base_url": base_url, "model": model}]}

    document: dict[str, Any] = {
        "version": 1,
        "timeouts": {"connect_s": 1, "first_byte_s": 2, "idle_s": 1, "total_s": 5},
        "pools": {
            "small": pool("echo"),
            "fail": pool("fail-500"),
            "reject": pool("reject-400"),
            "hang": pool("hang"),
            "badjson": pool("bad-json"),
            "malformed": pool("malformed-sse"),
            "cut": pool("cut-stream"),
            "slow": pool("slow-stream"),
            "down": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "echo"}]},
        },
        "aliases": {"gpt-4o-mini": "small"},
        "auth": {"required": False},
        # one attempt: fault tests see each upstream failure as it is (the retry stage's own tests,
        # tests/gateway/stages/test_retry.py and tests/integration/stages/test_retry.py, cover retries)
        "retry": {"max_attempts": 1},
        "store": {"url_env": None},
    }
    document.update(extra)
    return document


class GatewayServer:
    """Starts ``create_app(settings)`` under uvicorn (uvloop + httptools) in a thread."""

    def __init__(
        self, policy_path: Path, *, settings: dict[str, Any] | None = None, **app_kwargs: Any
    ) -> None:
        self.port = free_port()
        self.settings = Settings(
            policy_path=str(policy_path),
            policy_overlay=str(policy_path) + ".overlay",
            port=self.port,
            # a test left hanging never waits 25 s; a policy change is seen within 0.1 s unless the
            # test parks the poller (``settings={"reload_interval_s": 3600}``) to reload it by API
            **{"reload_interval_s": 0.1, "drain_timeout_s": 5.0, **(settings or {})},
        )
        self.app = create_app(self.settings, **app_kwargs)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            loop="uvloop",
            http=guarded_protocol(self.settings.header_read_timeout_s),  # what `sortyard serve` runs
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # as `sortyard serve`: X-Forwarded-For only per the policy
            lifespan="on",
            timeout_graceful_shutdown=self.settings.drain_timeout_s,  # type: ignore[arg-type]  # a float works
        )
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            self.loop = runner.get_loop()
            runner.run(self.server.serve())

    @property
    def gateway(self) -> Any:
        return self.app.state.gateway

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.01)
        return self

    def settle(self, timeout_s: float = 10.0) -> GatewayServer:
        """Return once every request answered so far has finished its after-response work and the
        store has written what it batched (see ``Gateway.settle``). A write Redis did not take in time
        is kept and sent again, so a slow round trip on a loaded machine is waited out, up to
        ``timeout_s``; past it, the store's ``StoreUnavailable`` is raised."""
        assert self.loop is not None, "not started"
        deadline = time.monotonic() + timeout_s * 0.9
        asyncio.run_coroutine_threadsafe(self._settle(deadline), self.loop).result(timeout_s)
        return self

    async def _settle(self, deadline: float) -> None:
        while True:
            try:
                await self.gateway.settle()
                return
            except StoreUnavailable:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.05)

    def compile_with(self, environ: dict[str, str]) -> GatewayServer:
        """Serve the same policy compiled against ``environ`` (its ``SORTYARD_*`` telemetry
        overrides) instead of this process's environment, as a restart with that environment would."""
        reloader = self.gateway.reloader

        def adopt() -> None:
            reloader.environ = environ
            reloader.adopt(compile_policy(reloader.policy, environ))

        assert self.loop is not None, "not started"
        self.loop.call_soon_threadsafe(adopt)
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop).result(10)  # adopt ran before it
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(self.settings.drain_timeout_s + 10)  # open requests get their drain first
