"""How fast the gateway lets go: a departing client reaching the upstream, and slow clients cut off.

A gateway (in process, uvicorn + uvloop + the guarded httptools protocol) in front of the fake
OpenAI upstream of the test suite. Measured, over ``--trials`` each:

- plain: a client sends a request the upstream never answers, then closes its socket; the time until
  the upstream sees its own connection closed (the engine would stop generating then);
- stream: the same for a stream the client leaves after its first event;
- headers / body: a client that stalls mid-headers or mid-body; the time until the gateway answers
  408 and closes (the configured bound plus what it costs to notice).

    python bench/departures.py                 # ~30 s
    python bench/departures.py --trials 200 --json-out departures.json
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.servers.fake_upstream import FakeUpstream  # noqa: E402
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy  # noqa: E402

HEADER_S = BODY_S = 1.0
_STALLED_BODY = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b'Content-Length: 1000\r\n\r\n{"model":'
)


def _request(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _wait(predicate, timeout_s: float = 30.0) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError("condition not reached")
        time.sleep(0.0005)
    return time.perf_counter()


def plain_departure_ms(gateway: GatewayServer, upstream: FakeUpstream) -> float:
    before, seen = upstream.num_hangs_abandoned, len(upstream.requests)
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    sock.sendall(
        _request("/v1/chat/completions", b'{"model": "hang", "messages": [{"role": "user", "content": "x"}]}')
    )
    _wait(lambda: len(upstream.requests) > seen)
    left = time.perf_counter()
    sock.close()
    return (_wait(lambda: upstream.num_hangs_abandoned > before) - left) * 1000


def stream_departure_ms(gateway: GatewayServer, upstream: FakeUpstream) -> float:
    before = upstream.num_streams_cancelled
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    body = b'{"model": "slow", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    sock.sendall(_request("/v1/chat/completions", body))
    while b"data:" not in sock.recv(65536):
        pass
    left = time.perf_counter()
    sock.close()
    # the fake notices on its next write: it writes every 50 ms, so this includes up to 50 ms of its own
    return (_wait(lambda: upstream.num_streams_cancelled > before) - left) * 1000


def stall_cut_s(gateway: GatewayServer, payload: bytes) -> float:
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    started = time.perf_counter()
    sock.sendall(payload)
    sock.settimeout(30)
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    assert b" 408 " in answer.split(b"\r\n", 1)[0], answer[:80]
    return time.perf_counter() - started


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max": round(ordered[-1], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["pools"]["hang"]["timeouts"] = {"first_byte_s": 600, "total_s": 600}
    document["timeouts"] = {"connect_s": 1, "first_byte_s": 5, "idle_s": 5, "total_s": 600}
    path = write_policy(Path(tempfile.mkdtemp()) / "policy.yaml", document)
    gateway = GatewayServer(path, settings={"header_read_timeout_s": HEADER_S, "body_read_timeout_s": BODY_S})
    gateway.start()
    try:
        results = {
            "plain departure ms": _summary(
                [plain_departure_ms(gateway, upstream) for _ in range(args.trials)]
            ),
            "stream departure ms": _summary(
                [stream_departure_ms(gateway, upstream) for _ in range(args.trials)]
            ),
            f"stalled headers cut s (bound {HEADER_S:g})": _summary(
                [stall_cut_s(gateway, b"POST /v1/chat/completions HTTP/1.1\r\nHo") for _ in range(5)]
            ),
            f"stalled body cut s (bound {BODY_S:g})": _summary(
                [stall_cut_s(gateway, _STALLED_BODY) for _ in range(5)]
            ),
        }
    finally:
        gateway.stop()
        upstream.stop()
    for name, summary in results.items():
        print(f"{name:36s} p50 {summary['p50']:>8}  p99 {summary['p99']:>8}  max {summary['max']:>8}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
