"""``switchyard``: serve the gateway, run it with a local engine, check policies, and more.

switchyard run    [--policy FILE] [--engine-model smollm2-135m]   (what ``make run`` does)
switchyard serve  [--policy FILE] [--host H] [--port P] [--workers N]
switchyard policy check FILE...
switchyard keys new --tenant T [--name N] [--admin]
switchyard route explain "prompt" [--policy FILE]
switchyard router train data.jsonl -o router.bin
switchyard cost estimate (--requests-per-month N | --requests-per-day N) --tokens-per-request N ...

``switchyard COMMAND --help`` says more about each.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import logging.config
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from gateway.api_keys import hash_key, key_stanza, new_key
from gateway.cli import cost
from gateway.policy import Policy, PolicyError, load_policy
from gateway.settings import Settings
from gateway.telemetry.access_log import LOGGER_NAME as ACCESS_LOGGER

if TYPE_CHECKING:
    import uvicorn

logger = logging.getLogger("switchyard.cli")


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The one line format of the gateway, its uvicorn and (``backends/server.py``) the reference engine."""
DEV_ACCESS_LOG = ".local/access.log"
"""Where ``switchyard run`` writes the access log unless the user asked for it on the terminal."""
ENGINE_LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_ENGINE_MODEL = "smollm2-135m"
EMBEDDING_MODEL = "all-minilm-l6-v2"
"""Served by the engine's embedder, not loaded as a generative model (``backends.embedder.MODEL_NAME``)."""
"""The log levels ``backends.server`` takes."""


def logging_config(settings: Settings) -> dict[str, Any]:
    """The gateway's logging, for ``logging.config.dictConfig``: every line in :data:`LOG_FORMAT` on
    standard error, and the access log in ``settings.access_log_file`` when one is set.

    uvicorn gets it as ``log_config`` (its own default has colours and another format), and each
    worker process applies it again.
    """
    level = settings.log_level.upper()
    if not isinstance(logging.getLevelName(level), int):
        level = "INFO"
    handlers: dict[str, Any] = {
        "stderr": {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}
    }
    # client libraries log every request at INFO: a real cost on the hot path
    loggers: dict[str, Any] = {name: {"level": "WARNING"} for name in ("httpx", "httpcore", "aiohttp.access")}
    if settings.access_log_file:
        handlers["access"] = {
            "class": "logging.FileHandler",
            "filename": settings.access_log_file,
            "formatter": "bare",
            "delay": True,
        }
        loggers[ACCESS_LOGGER] = {"level": "INFO", "handlers": ["access"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"format": LOG_FORMAT}, "bare": {"format": "%(message)s"}},
        "handlers": handlers,
        "loggers": loggers,
        "root": {"level": level, "handlers": ["stderr"]},
    }


def _configure_logging(settings: Settings) -> None:
    if settings.access_log_file:
        Path(settings.access_log_file).parent.mkdir(parents=True, exist_ok=True)
    logging.config.dictConfig(logging_config(settings))


def _wait_http_ok(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
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
    url = f"http://{settings.host}:{settings.port}"
    access_log = f" (access log: {settings.access_log_file})" if settings.access_log_file else ""
    key_line = (
        f"export OPENAI_API_KEY={api_key}\n"
        if api_key is not None
        else "export OPENAI_API_KEY=...   # auth is on: one of the policy's keys "
        "(`switchyard keys new --tenant NAME` makes one)\n"
    )
    return (
        f"Switchyard is ready on {url}{access_log}. Paste into a shell:\n"
        f"export OPENAI_BASE_URL={url}/v1\n" + key_line
    )


def _print(banner: str) -> None:
    sys.stdout.write(banner)
    sys.stdout.flush()


def _announce_when_ready(settings: Settings, banner: str) -> None:
    """Several workers start on their own: print the banner at the first answer of ``/healthz``."""

    def wait() -> None:
        if _wait_http_ok(f"http://{settings.host}:{settings.port}/healthz", 120):
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


def _quiet_single_process_salt(settings: Settings, policy: Policy) -> None:
    """One process and no shared store: a salt secret made here is the only one there is, so set it
    rather than have the pick stage warn, on the first request, that replicas' salts could differ."""
    secret_env, store_env = policy.cache.affinity.salt_secret_env, policy.store.url_env
    is_shared = settings.workers > 1 or bool(store_env and os.environ.get(store_env))
    if secret_env and not is_shared and not os.environ.get(secret_env):
        os.environ[secret_env] = secrets.token_hex(16)


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
    ):
        os.environ[f"SWITCHYARD_{name}"] = value
    options: dict[str, Any] = dict(
        factory=True,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="gateway.http_protocol:GuardedHttpToolsProtocol",  # httptools + a request-header deadline
        access_log=False,
        log_config=logging_config(settings),
        log_level=settings.log_level,
        lifespan="on",
        timeout_keep_alive=30,
        timeout_graceful_shutdown=settings.drain_timeout_s,
        backlog=4096,
    )
    if api_key is None and not policy.auth.required:
        api_key = "sk-anything"  # any key passes; the SDK insists on one
    banner = _banner(settings, api_key)
    if settings.workers > 1:
        # every worker's metrics in one /metrics: prometheus_client's multiprocess mode, set up
        # before the workers import it
        from gateway.telemetry.metrics import prepare_multiprocess

        prepare_multiprocess(tempfile.mkdtemp(prefix="switchyard-metrics-"))
        _announce_when_ready(settings, banner)
        uvicorn.run("gateway.app:create_app", workers=settings.workers, **options)
        return 0
    _quiet_single_process_salt(settings, policy)
    server = _announcing_server(uvicorn.Config("gateway.app:create_app", **options), banner)
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn re-raises it after its graceful shutdown
        pass
    return 0


def local_engine(settings: Settings) -> tuple[tuple[str, int] | None, list[str]]:
    """The loopback host:port the policy's replicas point at first (the local engine's), and the
    generative models they name there, in policy order (the engine's embedder serves the embedding
    model on its own)."""
    policy = load_policy(settings.policy_path, settings.overlay_path)
    target: tuple[str, int] | None = None
    models: list[str] = []
    for pool in policy.pools.values():
        for replica in pool.replicas:
            parts = urlsplit(replica.base_url)
            if parts.hostname not in ("127.0.0.1", "localhost") or not parts.port:
                continue
            target = target or (parts.hostname, parts.port)
            if (parts.hostname, parts.port) == target and replica.model not in (EMBEDDING_MODEL, *models):
                models.append(replica.model)
    return target, models


def ensure_dev_key(overlay: str, key_file: str = ".local/dev-key") -> str:
    """The development key ``make run`` prints: made on first run, its hash put in the overlay.

    The key's text stays in a git-ignored file readable only by you; the overlay (also git-ignored)
    holds only its hash.
    """
    path = Path(key_file)
    if path.exists():
        key = path.read_text().strip()
    else:
        key = new_key()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(key + "\n")
    digest = hash_key(key)
    overlay_path = Path(overlay)
    document = (yaml.safe_load(overlay_path.read_text()) if overlay_path.exists() else None) or {}
    keys = document.setdefault("keys", [])
    if not any(isinstance(k, dict) and k.get("sha256") == digest for k in keys):
        keys.append({"sha256": digest, "tenant": "dev", "name": "dev", "admin": True})
        header = "# Written by `make run`: local settings, git-ignored. Holds only key hashes.\n"
        overlay_path.write_text(header + yaml.safe_dump(document, sort_keys=False))
    return key


def keys_new(tenant: str, name: str | None, admin: bool) -> int:
    key = new_key()
    print(f"API key (shown once, store it now): {key}\n")
    print("Add under `keys:` in your policy:")
    stanza = key_stanza(key, tenant, name)
    print(stanza + ("    admin: true\n" if admin else ""), end="")
    return 0


def dev_settings(settings: Settings) -> Settings:
    """What ``switchyard run`` changes for a development run: the access log goes to a file, so the
    terminal keeps the banner, unless the user asked for it (``SWITCHYARD_ACCESS_LOG`` or the
    policy's ``telemetry.access_log``)."""
    if settings.access_log_file or os.environ.get("SWITCHYARD_ACCESS_LOG"):
        return settings
    for path in (settings.policy_path, settings.overlay_path):
        try:
            document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue  # a missing overlay; a broken policy is reported when it is loaded
        telemetry = document.get("telemetry") if isinstance(document, dict) else None
        if isinstance(telemetry, dict) and "access_log" in telemetry:
            return settings
    return dataclasses.replace(settings, access_log_file=DEV_ACCESS_LOG)


def engine_command(
    settings: Settings, models: Sequence[str], host: str, port: int
) -> tuple[list[str], dict[str, str]]:
    """The reference engine's command line and environment in ``switchyard run``: one process serving
    every model."""
    command = [sys.executable, "-m", "backends.server", *(a for m in models for a in ("--model", m))]
    command += ["--host", host, "--port", str(port)]
    if settings.log_level.lower() in ENGINE_LOG_LEVELS:
        command += ["--log-level", settings.log_level.lower()]
    env = dict(os.environ)
    # transformers draws a "Loading weights" progress bar when the embedding model loads
    env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return command, env


def run_local(settings: Settings, engine_models: Sequence[str] | None, *, start_engine: bool) -> int:
    """``make run``: start the reference engine the default policy points at (serving the models its
    replicas name there, unless ``engine_models`` says otherwise), then the gateway."""
    dev_key = ensure_dev_key(settings.overlay_path)
    engine: subprocess.Popen[bytes] | None = None
    target, models = local_engine(settings) if start_engine else (None, [])
    if target is not None:
        host, port = target
        models = list(engine_models or models or [DEFAULT_ENGINE_MODEL])
        print(f"starting the reference engine ({', '.join(models)}) on {host}:{port} ...", flush=True)
        command, env = engine_command(settings, models, host, port)
        engine = subprocess.Popen(command, env=env)
        if not _wait_http_ok(f"http://{host}:{port}/ready", 600, engine):
            print("error: the engine did not come up", file=sys.stderr)
            engine.terminate()
            return 1

    def exit_on_signal(signum: int, frame: object) -> None:
        # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown: exit through `finally`
        # so the engine is stopped too, never orphaned
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_on_signal)
    try:
        return serve(settings, api_key=dev_key)
    finally:
        if engine is not None:
            engine.send_signal(signal.SIGTERM)
            try:
                engine.wait(timeout=10)
            except subprocess.TimeoutExpired:
                engine.kill()


def policy_check(paths: Sequence[str]) -> int:
    status = 0
    for path in paths:
        try:
            policy = load_policy(path)
        except PolicyError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
            continue
        replicas = sum(len(p.replicas) for p in policy.pools.values())
        print(f"{path}: ok ({len(policy.pools)} pools, {replicas} replicas, {len(policy.aliases)} aliases)")
    return status


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        policy_path=args.policy,
        policy_overlay=args.overlay,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
    )


def _serve_command(args: argparse.Namespace) -> int:
    settings = _settings(args)
    _configure_logging(settings)
    return serve(settings)


def _run_command(args: argparse.Namespace) -> int:
    settings = dev_settings(_settings(args))
    _configure_logging(settings)
    return run_local(settings, args.engine_model, start_engine=not args.no_engine)


def _route_explain(argv: list[str]) -> int:
    from gateway.cli.explain import explain_main

    return explain_main(argv)


def _router_train(argv: list[str]) -> int:
    from gateway.cli.train import train_main  # the one place that imports torch

    return train_main(argv)


def _forward(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    to: Callable[[list[str]], int],
    help: str,
) -> None:
    """A leaf whose module parses its own arguments (``--help`` too): it gets what follows ``name``."""
    commands.add_parser(name, help=help, add_help=False).set_defaults(forward=to)


def _parser() -> argparse.ArgumentParser:
    """Every command in one tree; each leaf sets ``handler`` (its arguments parsed) or ``forward``."""
    parser = argparse.ArgumentParser(
        prog="switchyard", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def server_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--policy", help="policy YAML (default: policies/default.yaml)")
        p.add_argument("--overlay", help="overlay YAML merged on top (default: local.yaml beside it)")
        p.add_argument("--host")
        p.add_argument("--port", type=int)
        p.add_argument("--workers", type=int)
        p.add_argument("--log-level")

    run = sub.add_parser("run", help="start the local reference engine, then the gateway (make run)")
    server_args(run)
    run.add_argument(
        "--engine-model",
        action="append",
        help="a model for the local engine; repeat for several (default: those the policy's local "
        "replicas name)",
    )
    run.add_argument("--no-engine", action="store_true", help="do not start the local engine")
    run.set_defaults(handler=_run_command)
    serve_p = sub.add_parser("serve", help="serve the gateway")
    server_args(serve_p)
    serve_p.set_defaults(handler=_serve_command)

    policy = sub.add_parser("policy", help="policy tools").add_subparsers(
        dest="policy_command", required=True
    )
    check = policy.add_parser("check", help="validate policy files without serving")
    check.add_argument("files", nargs="+")
    check.set_defaults(handler=lambda args: policy_check(args.files))

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    keys_new_p = keys.add_parser("new", help="print a fresh key once, plus the policy stanza with its hash")
    keys_new_p.add_argument("--tenant", required=True)
    keys_new_p.add_argument("--name")
    keys_new_p.add_argument("--admin", action="store_true", help="may read /v1/usage")
    keys_new_p.set_defaults(handler=lambda args: keys_new(args.tenant, args.name, args.admin))

    route = sub.add_parser("route", help="where model: auto goes").add_subparsers(
        dest="route_command", required=True
    )
    _forward(route, "explain", _route_explain, help='which pool `model: "auto"` would pick, and why')
    router = sub.add_parser("router", help="the learned tier classifier: train it")
    router_commands = router.add_subparsers(dest="router_command", required=True)
    _forward(router_commands, "train", _router_train, help="train it on JSONL (the only torch import)")

    cost_doc = cost.__doc__ or ""
    cost_p = sub.add_parser("cost", help="capacity and cost", description=cost_doc.split("\n\n")[0])
    estimate = cost_p.add_subparsers(dest="cost_command", required=True).add_parser(
        "estimate",
        help="monthly GPU cost of a workload",
        description=cost_doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cost.add_estimate_arguments(estimate)
    estimate.set_defaults(handler=cost.estimate_main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    forward = getattr(args, "forward", None)
    if forward is not None:
        return int(forward(rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
