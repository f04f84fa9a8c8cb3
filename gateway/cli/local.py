"""``sortyard run`` (what ``make run`` does): the reference engine the policy points at, then the gateway,
with a development key and the access log in a file."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from gateway.cli.serve import serve, wait_http_ok
from gateway.keys.hashing import hash_key, new_key
from gateway.policy import load_policy
from gateway.settings import Settings

DEV_ACCESS_LOG = ".local/access.log"
DEV_KEYS_FILE = ".local/keys.json"
"""Keys made through the admin API during development runs: kept across restarts (git-ignored)."""
DEV_AUDIT_FILE = ".local/audit.jsonl"
"""The audit trail of development runs (``gateway.audit``), unless ``SORTYARD_AUDIT_FILE`` says where."""
"""Where ``sortyard run`` writes the access log unless the user asked for it on the terminal."""
ENGINE_LOG_LEVELS = ("debug", "info", "warning", "error")
"""The log levels ``backends.server`` takes."""
DEFAULT_ENGINE_MODEL = "smollm2-135m"
EMBEDDING_MODEL = "all-minilm-l6-v2"
"""Served by the engine's embedder, not loaded as a generative model (``backends.embedder.MODEL_NAME``)."""


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


def dev_settings(settings: Settings) -> Settings:
    """What ``sortyard run`` changes for a development run: keys made through the admin API are
    kept in ``.local/keys.json`` (unless ``SORTYARD_KEYS_FILE`` says where), and the access log goes
    to a file, so the terminal keeps the banner, unless the user asked for it
    (``SORTYARD_ACCESS_LOG`` or the policy's ``telemetry.access_log``)."""
    if settings.keys_file is None:
        settings = dataclasses.replace(settings, keys_file=DEV_KEYS_FILE)
    if settings.audit_file is None:
        settings = dataclasses.replace(settings, audit_file=DEV_AUDIT_FILE)
    if settings.access_log_file or os.environ.get("SORTYARD_ACCESS_LOG"):
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
    """The reference engine's command line and environment in ``sortyard run``: one process serving
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
        if not wait_http_ok(f"http://{host}:{port}/ready", 600, engine):
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
