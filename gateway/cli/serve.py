"""``sortyard serve``: the gateway under uvicorn, and the banner (the two ``export`` lines) printed once
it answers.

SIGTERM drains each serving process (the one process, or every worker: uvicorn's supervisor passes
the signal on to each): ``/readyz`` fails at once, connections are still taken for
``drain_delay_s``, then uvicorn stops listening, lets open requests finish for ``drain_timeout_s``
(``timeout_graceful_shutdown``), cuts what is left, and the app's shutdown settles every request.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from gateway.cli.logs import logging_config
from gateway.policy import Policy, PolicyError, load_policy
from gateway.settings import Settings
from gateway.tls import uvicorn_tls_options

if TYPE_CHECKING:
    import uvicorn

    from gateway.instance import Gateway
    from gateway.proxy import ProxyApp

_APP_FACTORY = "gateway.cli.serve:served_app"


def wait_http_ok(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Poll ``url`` until it answers 200 (True), ``timeout_s`` passes or ``proc`` exits (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _banner(settings: Settings, api_key: str | None) -> str:
    """The ready lines; with ``api_key`` None (auth required, no key known here) the key line says how
    to get one instead of printing a key the gateway would refuse."""
    scheme = "https" if settings.tls_certfile else "http"
    url = f"{scheme}://{settings.host}:{settings.port}"
    access_log = f" (access log: {settings.access_log_file})" if settings.access_log_file else ""
    key_line = (
        f"export OPENAI_API_KEY={api_key}\n"
        if api_key is not None
        else "export OPENAI_API_KEY=...   # auth is on: one of the policy's keys "
        "(`sortyard keys new --tenant NAME` makes one)\n"
    )
    return (
        f"Sortyard is ready on {url}{access_log}. Paste into a shell:\n"
        f"export OPENAI_BASE_URL={url}/v1\n" + key_line
    )


def _print(banner: str) -> None:
    sys.stdout.write(banner)
    sys.stdout.flush()


def _wait_listening(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def _announce_when_ready(settings: Settings, banner: str) -> None:
    """Several workers start on their own: print the banner at the first answer of ``/healthz``."""

    def wait() -> None:
        if settings.tls_certfile:  # the handshake may want a client certificate: wait for the port
            if _wait_listening(settings.host, settings.port, 120):
                _print(banner)
        elif wait_http_ok(f"http://{settings.host}:{settings.port}/healthz", 120):
            _print(banner)

    threading.Thread(target=wait, daemon=True).start()


def _announcing_server(config: uvicorn.Config, banner: str) -> uvicorn.Server:
    """uvicorn's server, which prints the banner once it listens: after its own start-up lines."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                _print(banner)

    return AnnouncingServer(config)


def served_app() -> ProxyApp:
    """What uvicorn loads in each serving process: ``create_app()`` with SIGTERM's drain hooked in."""
    from gateway.app import create_app

    app = create_app()
    hook_drain(app.gateway, app.gateway.settings.drain_delay_s)
    return app


def hook_drain(gateway: Gateway, delay_s: float) -> None:
    """Wrap uvicorn's SIGTERM and SIGINT handlers (installed before it loads the app): the gateway
    drains at once (``/readyz`` 503), and uvicorn's own stop follows ``delay_s`` later for SIGTERM, at
    once for Ctrl-C or a second signal. Not uvicorn's main thread (no handler of its own): nothing."""
    loop = asyncio.get_running_loop()
    for sig, wait_s in ((signal.SIGTERM, delay_s), (signal.SIGINT, 0.0)):
        stop = signal.getsignal(sig)
        if not callable(stop):
            continue

        def on_signal(
            signum: int,
            frame: FrameType | None,
            stop: Callable[[int, FrameType | None], Any] = stop,
            wait_s: float = wait_s,
        ) -> None:
            is_first = not gateway.is_draining
            gateway.start_draining()
            if is_first and wait_s > 0:  # keep serving while the load balancer takes us out
                loop.call_soon_threadsafe(loop.call_later, wait_s, stop, signum, None)
            else:
                stop(signum, frame)

        signal.signal(sig, on_signal)


def _quiet_single_process_salt(settings: Settings, policy: Policy) -> None:
    """One process and no shared store: a salt secret made here is the only one there is, so set it
    rather than have the pick stage warn, on the first request, that replicas' salts could differ."""
    secret_env, store_env = policy.cache.affinity.salt_secret_env, policy.store.url_env
    is_shared = settings.workers > 1 or bool(store_env and os.environ.get(store_env))
    if secret_env and not is_shared and not os.environ.get(secret_env):
        os.environ[secret_env] = secrets.token_hex(16)


def _drained(signum: int, frame: FrameType | None) -> None:
    """SIGTERM after uvicorn's graceful shutdown (it re-raises what it caught): already done."""


def serve(settings: Settings, *, api_key: str | None = None) -> int:
    """Run the gateway with uvicorn on uvloop and httptools (about 1.5x asyncio + h11); print the
    banner (the two ``export`` lines) once it answers."""
    import uvicorn

    try:
        policy = load_policy(settings.policy_path, settings.overlay_path)
    except PolicyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, value in (
        ("POLICY_PATH", settings.policy_path),
        ("POLICY_OVERLAY", settings.overlay_path),
        ("HOST", settings.host),
        ("PORT", str(settings.port)),
        ("LOG_LEVEL", settings.log_level),
        ("DRAIN_DELAY_S", str(settings.drain_delay_s)),
        ("DRAIN_TIMEOUT_S", str(settings.drain_timeout_s)),
    ):
        os.environ[f"SORTYARD_{name}"] = value
    options: dict[str, Any] = dict(
        factory=True,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="gateway.http_protocol:GuardedHttpToolsProtocol",  # httptools + a request-header deadline
        access_log=False,
        # the client is the socket peer; X-Forwarded-For is read only from the policy's
        # limits.unauthenticated.trusted_proxies (uvicorn would believe it from 127.0.0.1)
        proxy_headers=False,
        log_config=logging_config(settings),
        log_level=settings.log_level,
        lifespan="on",
        timeout_keep_alive=30,
        timeout_graceful_shutdown=settings.drain_timeout_s,
        backlog=4096,
        **uvicorn_tls_options(settings),  # HTTPS when given a certificate, reloaded when it changes
    )
    if api_key is None and not policy.auth.required:
        api_key = "sk-anything"  # any key passes; the SDK insists on one
    banner = _banner(settings, api_key)
    if settings.workers > 1:
        # every worker's metrics in one /metrics: prometheus_client's multiprocess mode, set up
        # before the workers import it
        from gateway.telemetry.multiprocess import prepare_multiprocess

        prepare_multiprocess(tempfile.mkdtemp(prefix="sortyard-metrics-"))
        # an admin drain reaches one worker: it marks the instance's file, which every worker reads
        drain_dir = None
        if not os.environ.get("SORTYARD_DRAIN_FILE"):
            drain_dir = tempfile.mkdtemp(prefix="sortyard-")
            os.environ["SORTYARD_DRAIN_FILE"] = os.path.join(drain_dir, "drain")
        _announce_when_ready(settings, banner)
        try:
            uvicorn.run(_APP_FACTORY, workers=settings.workers, **options)  # SIGTERM reaches every worker
        finally:
            if drain_dir is not None:
                shutil.rmtree(drain_dir, ignore_errors=True)
        return 0
    _quiet_single_process_salt(settings, policy)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # uvicorn re-raises SIGTERM once it has drained: exit 0 then, not by the signal
        signal.signal(signal.SIGTERM, _drained)
    server = _announcing_server(uvicorn.Config(_APP_FACTORY, **options), banner)
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn re-raises it after its graceful shutdown
        pass
    return 0
