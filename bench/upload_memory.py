"""What large uploads cost a gateway in memory: its RSS before, at peak and after bursts of big bodies.

Three bursts of ``--uploads`` concurrent requests of ``--mib`` MiB each, against one gateway worker
with the full policy (keys required, 1 MiB ``max_body_bytes``):

- **no key, declared length**: ``Content-Length`` of the whole body, no ``Authorization``;
- **no key, chunked**: the same bytes with ``Transfer-Encoding: chunked``;
- **a key, chunked, over the limit**: authenticated, no declared length, so only the running count
  can stop it.

Each client writes its body as fast as the gateway takes it and stops when the answer comes (or the
connection closes). The gateway's RSS is sampled every 5 ms from /proc; reported per burst: RSS
before, the peak during it, RSS after it settled, the statuses the clients saw and the MiB each sent.

    python bench/upload_memory.py                   # 8 uploads of 60 MiB per burst
    python bench/upload_memory.py --uploads 4 --mib 200
    python bench/upload_memory.py --tree /tmp/sy-before   # another checkout (git worktree add)
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from harness.nginx import CannedUpstream
from harness.redis import RedisServer
from harness.targets import GatewayConfig, start_gateway

HERE = Path(__file__).resolve().parent
CHUNK = b"x" * (256 * 1024)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """Samples a process's RSS every 5 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.005)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def upload(port: int, mib: int, *, key: str | None, chunked: bool) -> tuple[str, float]:
    """One upload: the status line's code (or what ended it) and the MiB written before the end."""
    size = mib * 1024 * 1024
    head = [b"POST /v1/chat/completions HTTP/1.1", b"Host: gateway", b"Content-Type: application/json"]
    head.append(b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode())
    if key is not None:
        head.append(f"Authorization: Bearer {key}".encode())
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(b"\r\n".join(head) + b"\r\n\r\n")
        conn.setblocking(False)
        reply = b""
        while sent < size and not reply:
            try:
                piece = CHUNK if not chunked else b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n"
                sent += conn.send(piece) if not chunked else _send_all(conn, piece)
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:
                break  # the gateway closed the connection: it answered, or cut the body
            try:
                reply = conn.recv(4096)
            except BlockingIOError:
                pass
            except OSError:
                break
        conn.setblocking(True)
        conn.settimeout(10)
        try:
            reply = reply or conn.recv(4096)
        except OSError:
            pass
    status = reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/1.1 ") else "closed"
    return status, sent / (1024 * 1024)


def _send_all(conn: socket.socket, data: bytes) -> int:
    view = memoryview(data)
    while view:
        try:
            view = view[conn.send(view) :]
        except BlockingIOError:
            time.sleep(0.001)
    return len(data)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uploads", type=int, default=8, help="concurrent uploads in each burst")
    parser.add_argument("--mib", type=int, default=60, help="the size of each body")
    parser.add_argument("--api-key", default="sk-sy-bench-0000000000000000")
    parser.add_argument("--tree", type=Path, default=HERE.parent, help="the gateway tree to run")
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="sy-upload-") as tmp:
        work = Path(tmp)
        upstream = CannedUpstream(work, "0")
        upstream.start()
        stack.callback(upstream.stop)
        redis = RedisServer(work, "0")
        redis.start()
        stack.callback(redis.stop)
        values = {
            "NGINX_PORT": str(upstream.port),
            "API_KEY_SHA256": hashlib.sha256(args.api_key.encode()).hexdigest(),
            "REDIS_URL": redis.url,
        }
        target = start_gateway(
            GatewayConfig(
                "gateway", HERE / "harness" / "policy-full.yaml.tmpl", {"SORTYARD_REDIS_URL": redis.url}
            ),
            values,
            index=0,
            cpus="1",
            work_dir=work,
            num_workers=1,
            timeout_s=60,
            repo_root=args.tree.resolve(),
        )
        stack.callback(target.process.stop)
        port = int(target.json_url.split(":")[2].split("/")[0])
        pid = target.process.pid
        bursts = (
            ("no key, declared length", None, False),
            ("no key, chunked", None, True),
            ("a key, chunked, over the limit", args.api_key, True),
        )
        print(
            f"{args.uploads} concurrent uploads of {args.mib} MiB a burst, one gateway worker (pid {pid})\n"
        )
        print("| burst | RSS before | peak | RSS after | statuses | MiB sent each (median) |")
        print("|---|---|---|---|---|---|")
        for label, key, chunked in bursts:
            before = rss_mib(pid)
            with PeakRss(pid) as peak, ThreadPoolExecutor(args.uploads) as pool:
                futures = [
                    pool.submit(upload, port, args.mib, key=key, chunked=chunked) for _ in range(args.uploads)
                ]
                results = [future.result() for future in futures]
            time.sleep(1.0)  # let the allocator hand back what the burst took
            after = rss_mib(pid)
            statuses = ", ".join(sorted({status for status, _ in results}))
            sent = sorted(mib for _, mib in results)[len(results) // 2]
            rss = f"{before:.1f} MiB | {peak.peak:.1f} MiB | {after:.1f} MiB"
            print(f"| {label} | {rss} | {statuses} | {sent:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
