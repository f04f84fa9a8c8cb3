"""A TCP relay that delays everything it carries: a slow link between hosts where the kernel has no
``sch_netem`` (``tc qdisc ... netem delay`` fails on this project's VMs).

    python -m tests.support.delay_relay LISTEN_HOST LISTEN_PORT TARGET_PORT DELAY_FILE

Listens on ``LISTEN_HOST:LISTEN_PORT`` and forwards each connection to ``127.0.0.1:TARGET_PORT``; every
chunk, in both directions, is delivered the number of milliseconds written in ``DELAY_FILE`` after it
arrived (read again every 20 ms, so a test changes the link's delay by writing the file; a missing or
empty file is 0). Order is kept: a chunk never overtakes the one before it. Run it inside a replica's
network namespace, in front of the replica, and every round trip to that host (requests, health
probes) grows by twice the delay, as a netem qdisc on its link would make it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

READ_EVERY_S = 0.02


class Delay:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = 0.0

    async def follow(self) -> None:
        while True:
            try:
                text = self.path.read_text().strip()
                self.seconds = float(text) / 1000.0 if text else 0.0
            except (OSError, ValueError):
                self.seconds = 0.0
            await asyncio.sleep(READ_EVERY_S)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay.seconds, data))
    except OSError:
        pass
    queue.put_nowait((0.0, b""))
    try:
        await sender
    except OSError:
        pass


async def main(host: str, port: int, target: int, delay_file: str) -> None:
    delay = Delay(Path(delay_file))
    follower = asyncio.create_task(delay.follow())

    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, upstream_writer, delay), pipe(upstream_reader, client_writer, delay)
        )

    server = await asyncio.start_server(relay, host, port)
    async with server:
        await server.serve_forever()
    follower.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
