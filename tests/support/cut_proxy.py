"""A TCP relay in front of a server that can be cut: ``CutProxy(port).start()``, then ``cut()``.

What a gateway sees of a backend that dies mid-stream is its connections reset with a response half
sent. ``cut()`` does exactly that to every connection open through the relay (the server itself runs
on, so a test need not restart a model server that takes a minute to start); new connections are
relayed again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

from tools.servers.redis_server import free_port


class CutProxy:
    """Relays 127.0.0.1:``port`` (its own) to ``target_port``, in a thread of its own."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.num_connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cut-proxy")

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> CutProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut(self) -> int:
        """Reset every connection open through the relay now; how many there were."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(10)

    async def _cut(self) -> int:
        writers = list(self._writers)
        for writer in writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:  # RST, not FIN: the peer sees the connection broken, not ended
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            writer.transport.abort()
        self._writers.clear()
        return len(writers) // 2

    async def _close(self) -> None:
        await self._cut()
        if self._server is not None:
            self._server.close()

    def _run(self) -> None:
        self._loop = loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", self.port))
        self._ready.set()
        loop.run_forever()
        loop.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.num_connections += 1
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort() if writer.transport.is_closing() else writer.close()
