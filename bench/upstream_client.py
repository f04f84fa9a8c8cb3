"""CPU per proxied request of the upstream clients: aiohttp's (``AiohttpUpstreamClient``) against the
gateway's own HTTP/1.1 client (``Http1UpstreamClient``).

    python bench/upstream_client.py [--rounds 7] [--requests 3000] [--concurrency 16]

A canned upstream (a raw asyncio server on llhttp answering every POST with a ~600-byte chat
completion, keep-alive, as nginx would) runs in a child process pinned to CPU 0 (``taskset -c 0``);
the clients run here, on uvloop as the gateway does, pinned to CPU 1. Each exchange is the gateway's
plain path: ``post`` with its headers and timeouts, ``read``, ``release``. CPU is this process's time
(``time.process_time``) per request, so the upstream's own cost and the wall clock's noise stay out.
Each round runs both clients, sequential then ``--concurrency`` at once, the order alternating round
by round; the figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httptools
import msgspec
import uvloop

from gateway.replicas.aiohttp_client import AiohttpUpstreamClient
from gateway.replicas.client import UpstreamClient
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.replicas.pools import Timeouts

ANSWER = msgspec.json.encode(
    {
        "id": "chatcmpl-bench0001",
        "object": "chat.completion",
        "created": 1732838400,
        "model": "canned",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello! How can I help you today? I can answer questions, draft text, "
                    "summarise documents or write code; tell me what you need and I will do my best.",
                    "refusal": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 39, "total_tokens": 50},
        "service_tier": "default",
    }
)
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Thu, 28 Nov 2024 00:00:00 GMT\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n"
    % len(ANSWER)
    + ANSWER
)
REQUEST = msgspec.json.encode(
    {
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "Say hello in one short sentence, please."}],
        "max_tokens": 64,
    }
)
TIMEOUTS = Timeouts()
KINDS: dict[str, Callable[[], UpstreamClient]] = {
    "aiohttp": lambda: AiohttpUpstreamClient(max_connections=1024),
    "http1": lambda: Http1UpstreamClient(max_connections=1024),
}


class _Canned(asyncio.Protocol):
    """The upstream: every complete request gets ``RESPONSE``."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(RESPONSE)


def serve(port: int) -> None:
    async def run() -> None:
        server = await asyncio.get_running_loop().create_server(_Canned, "127.0.0.1", port, backlog=1024)
        await server.serve_forever()

    uvloop.run(run())


def start_upstream() -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)]
    if shutil.which("taskset") and len(os.sched_getaffinity(0)) > 1:
        command = ["taskset", "-c", "0", *command]
    process = subprocess.Popen(command)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise SystemExit("the canned upstream did not start") from None
            time.sleep(0.05)


async def exchange(client: UpstreamClient, url: str, number: int) -> None:
    headers = {
        "Content-Type": "application/json",
        "X-Request-Id": f"bench-{number}",
        "Authorization": "Bearer k",
    }
    response = await client.post(url, REQUEST, headers, TIMEOUTS, "upstream bench", headers_s=600.0)
    body = await response.read()
    response.release()
    assert response.status == 200 and len(body) == len(ANSWER)


async def measure(client: UpstreamClient, url: str, requests: int, concurrency: int) -> tuple[float, float]:
    """CPU microseconds per request and requests per second, ``concurrency`` at a time."""
    per_worker = requests // concurrency

    async def worker(offset: int) -> None:
        for i in range(per_worker):
            await exchange(client, url, offset + i)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(w * per_worker) for w in range(concurrency)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    done = per_worker * concurrency
    return cpu / done * 1e6, done / wall


Results = dict[tuple[str, int], list[float]]
"""CPU microseconds per request, by client and width, one per round."""


async def bench(port: int, rounds: int, requests: int, concurrency: int) -> Results:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    clients = {kind: make() for kind, make in KINDS.items()}
    results: Results = {}
    try:
        for client in clients.values():  # warm: connections open, code paths hot
            await measure(client, url, 512, concurrency)
        for round_ in range(rounds):
            order = list(clients) if round_ % 2 == 0 else list(reversed(clients))
            for kind in order:
                for width in (1, concurrency):
                    cpu_us, rate = await measure(clients[kind], url, requests, width)
                    results.setdefault((kind, width), []).append(cpu_us)
                    print(
                        f"round {round_ + 1} {kind:8} x{width:<3} {cpu_us:7.1f} us CPU/req {rate:8.0f} req/s"
                    )
    finally:
        for client in clients.values():
            await client.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=3000, help="per client, width and round")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the child: the canned upstream
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {1})
    else:
        print("one CPU only: client and upstream share it", file=sys.stderr)
    process, port = start_upstream()
    try:
        results = uvloop.run(bench(port, args.rounds, args.requests, args.concurrency))
    finally:
        process.terminate()
        process.wait()
    print(f"\nmedian CPU per request over {args.rounds} rounds (us; lower is better)")
    print(f"{'width':>6} {'aiohttp':>9} {'http1':>9} {'ratio':>7}")
    for width in (1, args.concurrency):
        old = statistics.median(results["aiohttp", width])
        new = statistics.median(results["http1", width])
        print(f"{width:>6} {old:9.1f} {new:9.1f} {old / new:6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
