"""``make loadtest``: run the Locust load test headless and write CSV and HTML reports.

    python loadtests/run.py                                   # starts `sortyard run`, 60 s steady, stops it
    python loadtests/run.py --host http://127.0.0.1:8000 --key sk-...     # against a running gateway
    python loadtests/run.py --shape burst --duration 3m --users 16
    python loadtests/run.py --classes ChatUser StreamingUser -- --loglevel DEBUG   # after --: to locust
    python loadtests/run.py --processes 2                     # a master and 2 worker processes here
    python loadtests/run.py --host URL --key K --master --expect-workers 4        # on one machine ...
    python loadtests/run.py --worker --master-host 10.0.0.5 --key K              # ... and on each other

Without ``--host`` it uses a gateway already answering on 127.0.0.1:<port> (``make run`` in another
shell; key from ``.local/dev-key``), else starts ``sortyard run`` itself with a temporary overlay
that adds a key limited to a few requests a minute (for the over-limit user), reads the key from the
``export OPENAI_API_KEY=`` line it prints, and stops it afterwards. Reports:
``loadtests/results/<name>_stats.csv`` (+ ``_failures``, ``_exceptions``, ``_stats_history``) and
``<name>.html``. Exit status: Locust's (1 when any request failed unexpectedly).

Distributed runs are Locust's: the master runs the shape and writes the reports and the summary,
over every worker's figures; ``<name>_workers.json`` holds each worker's request count. A worker
needs only the master's address and the keys (``--key``, ``--limited-key`` or their variables).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadtests.config import ENV_PREFIX, USER_CLASSES  # noqa: E402
from loadtests.report import read_failures, read_stats, read_workers, summary  # noqa: E402

LOCUSTFILE = REPO / "loadtests" / "locustfile.py"
RESULTS_DIR = REPO / "loadtests" / "results"
LIMITED_KEY_RPM = 1
"""The over-limit user's key admits this many requests a minute; the rest are its expected 429s."""


def _root_url(url: str) -> str:
    """``http://h:p/v1`` or ``http://h:p/`` -> ``http://h:p`` (the users add ``/v1/...``)."""
    url = url.rstrip("/")
    return url.removesuffix("/v1")


def _answers(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def parse_exports(lines: Sequence[str]) -> dict[str, str]:
    """``export NAME=value`` lines (what ``sortyard run`` prints when ready) as a dict."""
    exports = {}
    for line in lines:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").strip().partition("=")
            exports[name] = value
    return exports


def probe_model(host: str, key: str, model: str, timeout_s: float = 120.0) -> str | None:
    """None when ``model`` answers a 1-token chat, else why not (so its user class can be left out)."""
    body = json.dumps(
        {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
    ).encode()
    request = urllib.request.Request(
        f"{host}/v1/chat/completions",
        data=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return None
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read()[:200].decode('utf-8', 'replace')}"
    except OSError as e:
        return str(e)


class LocalGateway:
    """``sortyard run`` as a subprocess: started, waited for, and stopped by this script."""

    def __init__(
        self, port: int, policy: str | None, limited_key: str, log_path: Path, *, start_engine: bool = True
    ) -> None:
        self.port = port
        self.policy = policy
        self.start_engine = start_engine
        self.limited_key = limited_key
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.exports: dict[str, str] = {}
        self._ready = threading.Event()
        self._tmp = tempfile.TemporaryDirectory(prefix="sortyard-loadtest-")

    def _overlay(self) -> Path:
        """The usual overlay plus one key with a tiny requests-per-minute limit."""
        import yaml

        from gateway.keys.hashing import hash_key
        from gateway.policy import merge

        policy = Path(self.policy or "policies/default.yaml")
        usual = policy.parent / "local.yaml"
        document = (yaml.safe_load(usual.read_text()) if usual.exists() else None) or {}
        limited = {
            "sha256": hash_key(self.limited_key),
            "tenant": "loadtest-limited",
            "name": "loadtest-limited",
            "limits": {"requests_per_minute": LIMITED_KEY_RPM},
        }
        path = Path(self._tmp.name) / "local.yaml"
        path.write_text(yaml.safe_dump(merge(document, {"keys": [limited]}), sort_keys=False))
        return path

    def _pump(self, stream: IO[str], log: IO[str]) -> None:
        lines: list[str] = []
        for line in stream:
            log.write(line)
            log.flush()
            if line.startswith("export OPENAI_"):
                lines.append(line)
                self.exports = parse_exports(lines)
                if len(self.exports) >= 2:
                    self._ready.set()
        self._ready.set()  # exited: wake the waiter

    def start(self, timeout_s: float) -> dict[str, str]:
        command = [sys.executable, "-m", "gateway", "run", "--overlay", str(self._overlay())]
        command += ["--port", str(self.port)] + (["--policy", self.policy] if self.policy else [])
        command += [] if self.start_engine else ["--no-engine"]
        print(f"starting: {' '.join(command)} (log: {self.log_path})", flush=True)
        log = self.log_path.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # our Ctrl-C stops it through stop(), once, engine included
        )
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout, log), daemon=True).start()
        if not self._ready.wait(timeout_s) or len(self.exports) < 2:
            self.stop()
            tail = self.log_path.read_text(errors="replace").splitlines()[-20:]
            raise RuntimeError(
                f"`sortyard run` did not print its export lines; {self.log_path} ends:\n" + "\n".join(tail)
            )
        return self.exports

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # it stops the engine it started, then exits
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._tmp.cleanup()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadtests/run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", help="gateway URL (with or without /v1); default: start one")
    parser.add_argument("--key", help="API key (default: $SORTYARD_LOADTEST_KEY, or the started gateway's)")
    parser.add_argument("--limited-key", help="a key with a tiny limit, for OverLimitUser")
    parser.add_argument("--duration", default="60s", help="Locust --run-time (30s, 5m, 1h30m)")
    parser.add_argument("--users", type=int, default=8, help="peak concurrent users")
    parser.add_argument(
        "--spawn-rate", type=float, default=None, help="users started a second (default: all at once)"
    )
    parser.add_argument("--shape", choices=("steady", "ramp", "burst"), default="steady")
    parser.add_argument("--classes", nargs="+", choices=USER_CLASSES, default=None, metavar="CLASS")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="max_tokens of every request (default 48)"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="no think time between a user's requests (throughput runs)"
    )
    parser.add_argument("--name", help="report name (default: <shape>-<timestamp>)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--stop-timeout", default="20s", help="let in-flight requests finish this long at the end"
    )
    parser.add_argument("--port", type=int, default=8000, help="port of the gateway to use or start")
    parser.add_argument("--policy", help="policy for the started gateway (default: policies/default.yaml)")
    parser.add_argument(
        "--no-engine", action="store_true", help="the started gateway's upstreams are already running"
    )
    parser.add_argument("--start-timeout", type=float, default=900.0, help="seconds to wait for it")
    distributed = parser.add_mutually_exclusive_group()
    distributed.add_argument(
        "--processes",
        type=int,
        default=None,
        help="a master and this many worker processes here (-1: a core each)",
    )
    distributed.add_argument(
        "--master", action="store_true", help="master of workers on other machines (see --expect-workers)"
    )
    distributed.add_argument(
        "--worker", action="store_true", help="a worker of the master at --master-host; nothing else runs"
    )
    parser.add_argument("--expect-workers", type=int, default=1, help="--master waits for this many workers")
    parser.add_argument("--master-host", default="127.0.0.1", help="--worker: the master's address")
    parser.add_argument("--master-port", type=int, default=5557, help="the master's port (Locust's)")
    parser.add_argument("locust_args", nargs="*", help="after --: passed to locust as they are")
    return parser


def _dev_key() -> str | None:
    path = Path(".local/dev-key")
    return path.read_text().strip() if path.exists() else None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        return run_worker(args)
    name = args.name or f"{args.shape}-{time.strftime('%Y%m%d-%H%M%S')}"
    args.results_dir.mkdir(parents=True, exist_ok=True)
    prefix = args.results_dir / name
    key = args.key or os.environ.get(ENV_PREFIX + "KEY")
    limited_key = args.limited_key or os.environ.get(ENV_PREFIX + "LIMITED_KEY")
    classes = list(args.classes or USER_CLASSES)
    gateway: LocalGateway | None = None
    host = args.host
    if host is None and _answers(f"http://127.0.0.1:{args.port}/healthz"):
        host = f"http://127.0.0.1:{args.port}"
        key = key or os.environ.get("OPENAI_API_KEY") or _dev_key()
        print(f"using the gateway already running on {host}", flush=True)
    try:
        if host is None:
            from gateway.keys.hashing import new_key

            limited_key = limited_key or new_key()
            log_path = Path(f"{prefix}.server.log")
            gateway = LocalGateway(
                args.port, args.policy, limited_key, log_path, start_engine=not args.no_engine
            )
            try:
                exports = gateway.start(args.start_timeout)
            except RuntimeError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
            host, key = exports["OPENAI_BASE_URL"], exports["OPENAI_API_KEY"]
        host = _root_url(host)
        if not key:
            print("error: no API key: pass --key or set SORTYARD_LOADTEST_KEY", file=sys.stderr)
            return 2
        if "OverLimitUser" in classes and not limited_key:
            classes.remove("OverLimitUser")
            print("note: no --limited-key: OverLimitUser left out", flush=True)
        if "AutoTierUser" in classes and (why := probe_model(host, key, "auto")) is not None:
            classes.remove("AutoTierUser")
            print(f"note: model 'auto' does not answer ({why}): AutoTierUser left out", flush=True)
        if not classes:
            print("error: no user classes left to run", file=sys.stderr)
            return 2
        return run_locust(args, host, key, limited_key, classes, prefix)
    finally:
        if gateway is not None:
            gateway.stop()


def _locust_env(args: argparse.Namespace, key: str, limited_key: str | None) -> dict[str, str]:
    """What the users read (``config.py``): the same on the master and on every worker."""
    env = {**os.environ, ENV_PREFIX + "KEY": key, ENV_PREFIX + "SHAPE": args.shape}
    if limited_key:
        env[ENV_PREFIX + "LIMITED_KEY"] = limited_key
    else:
        env.pop(ENV_PREFIX + "LIMITED_KEY", None)
    if args.max_tokens is not None:
        env[ENV_PREFIX + "MAX_TOKENS"] = str(args.max_tokens)
    if args.no_wait:
        env[ENV_PREFIX + "NO_WAIT"] = "1"
    return env


def _distributed_args(args: argparse.Namespace) -> list[str]:
    """Locust's own flags for ``--processes`` (its forked workers dial ``--master-port``) and ``--master``."""
    port = ["--master-bind-port", str(args.master_port)]
    if args.processes is not None:
        return ["--processes", str(args.processes), *port, "--master-port", str(args.master_port)]
    if args.master:
        return ["--master", "--expect-workers", str(args.expect_workers), *port]
    return []


def run_worker(args: argparse.Namespace) -> int:
    """``--worker``: Locust as a worker of the master at ``--master-host`` (it sends the users to run)."""
    key = args.key or os.environ.get(ENV_PREFIX + "KEY")
    if not key:
        print("error: no API key: pass --key or set SORTYARD_LOADTEST_KEY", file=sys.stderr)
        return 2
    limited_key = args.limited_key or os.environ.get(ENV_PREFIX + "LIMITED_KEY")
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker"]
    command += ["--master-host", args.master_host, "--master-port", str(args.master_port), *args.locust_args]
    print(f"locust worker of {args.master_host}:{args.master_port}", flush=True)
    return subprocess.run(command, env=_locust_env(args, key, limited_key), cwd=REPO).returncode


def run_locust(
    args: argparse.Namespace, host: str, key: str, limited_key: str | None, classes: list[str], prefix: Path
) -> int:
    users = max(args.users, len(classes))  # fewer users than classes would leave some classes idle
    env = _locust_env(args, key, limited_key if "OverLimitUser" in classes else None)
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", host,
        "--users", str(users), "--spawn-rate", str(args.spawn_rate or users), "--run-time", args.duration,
        "--stop-timeout", args.stop_timeout, "--csv", str(prefix), "--html", f"{prefix}.html",
        "--only-summary", *_distributed_args(args), *args.locust_args, *classes,
    ]  # fmt: skip
    where = " ".join(_distributed_args(args)) or "one process"
    print(
        f"locust: {args.shape}, {users} users, {args.duration}, {where}, classes {' '.join(classes)}",
        flush=True,
    )
    rc = subprocess.run(command, env=env, cwd=REPO).returncode
    stats = Path(f"{prefix}_stats.csv")
    if stats.exists():
        rows = read_stats(prefix)
        print("\n" + summary(rows, read_workers(prefix)))
        failures = read_failures(prefix)
        for line in failures:
            print(f"failure: {line}")
        if rc == 0 and (failures or any(row.num_failures for row in rows)):
            rc = 1  # Locust settles its exit code before the last in-flight requests end
        print(f"\nreports: {stats} and {prefix}.html")
        print(
            f"cost: sortyard cost estimate --from-result {stats} --requests-per-month N "
            "--tokens-per-request T --gpu-hour-usd P"
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
