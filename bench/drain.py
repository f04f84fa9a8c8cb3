"""How long a drain takes: SIGTERM to a real ``sortyard serve`` process with streams open.

A gateway process (``python -m gateway serve``, one worker, the in-process store) in front of the fake
OpenAI upstream of the test suite. Each trial opens ``--streams`` slow streams (200 events over 10 s),
sends SIGTERM once each has its first event, and measures from the signal:

- port closed: until a new connection is refused (``SORTYARD_DRAIN_DELAY_S`` is 0);
- streams cut: until the last open stream's connection is closed by the gateway (the streams are
  longer than the drain deadline, so each is cut at it);
- exit: until the process has exited (the cut requests settled, the store flushed), and its status.

    python bench/drain.py                          # ~20 s: 5 trials, deadline 2 s
    python bench/drain.py --deadline-s 25 --trials 3 --json-out drain.json
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.servers.fake_upstream import FakeUpstream  # noqa: E402
from tools.servers.gateway_process import GatewayProcess  # noqa: E402
from tools.servers.gateway_server import fake_policy, write_policy  # noqa: E402

_SLOW = b'{"model": "slow", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(_SLOW)}\r\n\r\n".encode()
    + _SLOW
)


class _Stream(threading.Thread):
    """One slow stream on a raw socket: when its first event came, when the gateway closed it."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(60)
        self.has_first_event = threading.Event()
        self.closed_at = 0.0
        self.body = b""

    def run(self) -> None:
        self.sock.sendall(_REQUEST)
        try:
            while chunk := self.sock.recv(65536):
                self.body += chunk
                if b"data:" in self.body:
                    self.has_first_event.set()
        except OSError:
            pass
        self.closed_at = time.perf_counter()
        self.has_first_event.set()
        self.sock.close()


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def trial(policy: Path, deadline_s: float, num_streams: int) -> dict[str, float]:
    """One SIGTERM with ``num_streams`` streams open; seconds from the signal to each event."""
    env = {"SORTYARD_DRAIN_DELAY_S": "0", "SORTYARD_DRAIN_TIMEOUT_S": str(deadline_s)}
    gateway = GatewayProcess(policy, env=env).wait_ready()
    try:
        streams = [_Stream(gateway.port) for _ in range(num_streams)]
        for stream in streams:
            stream.start()
        for stream in streams:
            if not stream.has_first_event.wait(10) or b"data:" not in stream.body:
                raise RuntimeError("a stream did not start")
        signalled = time.perf_counter()
        gateway.terminate()
        while not _refuses(gateway.port):
            time.sleep(0.001)
        port_closed = time.perf_counter()
        status = gateway.wait_exit(deadline_s + 30)
        exited = time.perf_counter()
        for stream in streams:
            stream.join(30)
        if status != 0 or any(stream.body.endswith(b"data: [DONE]\n\n") for stream in streams):
            raise RuntimeError(f"exit status {status}, or a stream finished before the deadline")
        return {
            "port closed s": port_closed - signalled,
            "streams cut s": max(stream.closed_at for stream in streams) - signalled,
            "exit s": exited - signalled,
        }
    finally:
        gateway.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--deadline-s", type=float, default=2.0, help="SORTYARD_DRAIN_TIMEOUT_S (< 10)")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)  # the fake upstream's writes to cut streams
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["timeouts"] = {"connect_s": 1, "first_byte_s": 5, "idle_s": 5, "total_s": 60}
    policy = write_policy(Path(tempfile.mkdtemp()) / "policy.yaml", document)
    try:
        runs = [trial(policy, args.deadline_s, args.streams) for _ in range(args.trials)]
    finally:
        upstream.stop()
    results: dict[str, dict[str, float]] = {}
    for name in runs[0]:
        values = sorted(run[name] for run in runs)
        results[name] = {
            "median": round(statistics.median(values), 3),
            "min": round(values[0], 3),
            "max": round(values[-1], 3),
        }
    print(f"deadline {args.deadline_s:g} s, {args.streams} streams, {args.trials} trials")
    for name, summary in results.items():
        print(f"{name:16s} median {summary['median']:>7}  min {summary['min']:>7}  max {summary['max']:>7}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
