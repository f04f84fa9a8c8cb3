"""``switchyard``: serve the gateway, run it with a local engine, check policies, and more.

switchyard serve [--policy FILE] [--host H] [--port P] [--workers N]
switchyard run   [--policy FILE] [--engine-model smollm2-135m]   (what ``make run`` does)
switchyard policy check FILE...
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from gateway.keys import hash_key, key_stanza, new_key
from gateway.policy import PolicyError, load_policy
from gateway.settings import Settings

logger = logging.getLogger("switchyard.cli")


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # client libraries log every request at INFO: a real cost on the hot path
    for noisy in ("httpx", "httpcore", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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


def _banner(settings: Settings, api_key: str) -> str:
    return (
        f"Switchyard is ready on http://{settings.host}:{settings.port}. Paste into a shell:\n"
        f"export OPENAI_BASE_URL=http://{settings.host}:{settings.port}/v1\n"
        f"export OPENAI_API_KEY={api_key}\n"
    )


def _announce_when_ready(settings: Settings, api_key: str) -> None:
    def wait() -> None:
        if _wait_http_ok(f"http://{settings.host}:{settings.port}/healthz", 120):
            sys.stdout.write(_banner(settings, api_key))
            sys.stdout.flush()

    threading.Thread(target=wait, daemon=True).start()


def serve(settings: Settings, *, api_key: str = "sk-anything") -> int:
    """Run the gateway with uvicorn on uvloop and httptools (about 1.5x asyncio + h11)."""
    import uvicorn

    try:
        load_policy(settings.policy_path, settings.overlay_path)
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
    if settings.workers > 1:
        # every worker's metrics in one /metrics: prometheus_client's multiprocess mode, set up
        # before the workers import it
        from gateway.telemetry import prepare_multiprocess

        prepare_multiprocess(tempfile.mkdtemp(prefix="switchyard-metrics-"))
    _announce_when_ready(settings, api_key)
    uvicorn.run(
        "gateway.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers if settings.workers > 1 else None,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level=settings.log_level,
        lifespan="on",
        timeout_keep_alive=30,
        backlog=4096,
    )
    return 0


def _local_engine_targets(settings: Settings) -> list[tuple[str, int]]:
    """Loopback host:port pairs the policy's replicas point at (the local engine's)."""
    policy = load_policy(settings.policy_path, settings.overlay_path)
    targets = []
    for pool in policy.pools.values():
        for replica in pool.replicas:
            parts = urlsplit(replica.base_url)
            if parts.hostname in ("127.0.0.1", "localhost") and parts.port:
                targets.append((parts.hostname, parts.port))
    return sorted(set(targets))


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


def run_local(settings: Settings, engine_model: str, *, start_engine: bool) -> int:
    """``make run``: start the reference engine the default policy points at, then the gateway."""
    dev_key = ensure_dev_key(settings.overlay_path)
    engine: subprocess.Popen[bytes] | None = None
    targets = _local_engine_targets(settings) if start_engine else []
    if targets:
        host, port = targets[0]
        print(f"starting the reference engine ({engine_model}) on {host}:{port} ...", flush=True)
        engine = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backends.server",
                "--model",
                engine_model,
                "--host",
                host,
                "--port",
                str(port),
            ],
        )
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


def _parser() -> argparse.ArgumentParser:
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

    server_args(sub.add_parser("serve", help="serve the gateway"))
    run = sub.add_parser("run", help="start the local reference engine and the gateway")
    server_args(run)
    run.add_argument("--engine-model", default="smollm2-135m")
    run.add_argument("--no-engine", action="store_true", help="do not start the local engine")
    check = sub.add_parser("policy", help="policy tools").add_subparsers(dest="policy_command", required=True)
    check_p = check.add_parser("check", help="validate policy files without serving")
    check_p.add_argument("files", nargs="+")
    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    keys_new_p = keys.add_parser("new", help="print a fresh key once, plus the policy stanza with its hash")
    keys_new_p.add_argument("--tenant", required=True)
    keys_new_p.add_argument("--name")
    keys_new_p.add_argument("--admin", action="store_true", help="may read /v1/usage")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # subcommands with their own argument parsers
    if argv[:1] == ["cost"]:
        from gateway.cost import cost_main

        return cost_main(argv[1:])
    if argv[:2] == ["router", "train"]:
        from gateway.routing.train import train_main  # the one place that imports torch

        return train_main(argv[2:])
    if argv[:2] == ["route", "explain"]:
        from gateway.routing.explain import explain_main

        return explain_main(argv[2:])
    args = _parser().parse_args(argv)
    if args.command == "policy":
        return policy_check(args.files)
    if args.command == "keys":
        return keys_new(args.tenant, args.name, args.admin)
    settings = Settings.from_env(
        policy_path=args.policy,
        policy_overlay=args.overlay,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
    )
    _configure_logging(settings.log_level)
    if args.command == "serve":
        return serve(settings)
    if args.command == "run":
        return run_local(settings, args.engine_model, start_engine=not args.no_engine)
    return 2


if __name__ == "__main__":
    sys.exit(main())
