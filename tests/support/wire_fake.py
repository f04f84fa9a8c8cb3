"""A backend played from its recorded wire: ``WireFake(transcript).start()``.

A transcript (``tests/backends_compat/wire/<kind>.json``) is what a server of that kind sent and was
sent, in its documented wire format::

    {"kind": "tgi", "source": "<where the format is documented>",
     "exchanges": [
       {"name": "generate", "request": {"method": "POST", "path": "/generate",
                                        "json": {"parameters": {"max_new_tokens": 8}}},
        "response": {"status": 200, "headers": {"Content-Type": "application/json"},
                     "chunks": ["{\\"generated_text\\": ...}"], "cut": false}}]}

A request is answered by the first exchange whose method and path match and whose ``json`` is a
subset of the request's JSON body (nested objects compared key by key, lists and scalars equal); a
``{"$absent": true}`` value requires the key's absence. ``chunks`` are written one after another,
each flushed (a stream arrives event by event); ``cut: true`` drops the connection after them, as a
server killed mid-stream. A request no exchange matches gets 599 and is kept in ``unmatched``: the
test then fails on a status no real server sends. ``received`` keeps every request, in order, as
``(method, path, json-or-None)``. An exchange's ``path`` may hold ``{model}``-style segments:
``*`` matches one path segment.

Several fakes may play one transcript on different ports (two replicas, each with its own load page:
``overrides`` replaces named exchanges' responses on one of them).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from tools.servers.redis_server import free_port

WIRE = Path(__file__).resolve().parents[1] / "backends_compat" / "wire"


def load_transcript(kind: str) -> dict[str, Any]:
    """``tests/backends_compat/wire/<kind>.json``."""
    document: dict[str, Any] = json.loads((WIRE / f"{kind}.json").read_text())
    return document


def is_subset(expected: Any, actual: Any) -> bool:
    """Whether ``expected`` is a key-by-key subset of ``actual`` (see the module's docstring)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return False
        for key, value in expected.items():
            if isinstance(value, dict) and value.get("$absent"):
                if key in actual:
                    return False
            elif key not in actual or not is_subset(value, actual[key]):
                return False
        return True
    return bool(expected == actual)


def _path_matches(pattern: str, path: str) -> bool:
    want, got = pattern.strip("/").split("/"), path.strip("/").split("/")
    return len(want) == len(got) and all(w in ("*", g) for w, g in zip(want, got, strict=True))


class WireFake:
    """An aiohttp server on loopback answering from a transcript, in a thread of its own."""

    def __init__(
        self, transcript: dict[str, Any], *, overrides: dict[str, dict[str, Any]] | None = None
    ) -> None:
        self.transcript = transcript
        self.overrides = dict(overrides or {})
        self.port = free_port()
        self.received: list[tuple[str, str, Any]] = []
        self.unmatched: list[tuple[str, str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"wire-{transcript['kind']}")

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WireFake:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the wire fake did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies received at ``path``."""
        return [body for _, p, body in self.received if p == path]

    def _run(self) -> None:
        self._loop = loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(self._runner.setup())
        loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._ready.set()
        loop.run_forever()
        loop.close()

    def _match(self, method: str, path: str, body: Any) -> dict[str, Any] | None:
        for exchange in self.transcript["exchanges"]:
            request = exchange["request"]
            if request.get("method", "POST") != method or not _path_matches(request["path"], path):
                continue
            if "json" in request and not is_subset(request["json"], body):
                continue
            return dict(exchange, response=self.overrides.get(exchange["name"], exchange["response"]))
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        entry = (request.method, request.path, body)
        self.received.append(entry)
        exchange = self._match(request.method, request.path, body)
        if exchange is None:
            self.unmatched.append(entry)
            return web.json_response(
                {"error": f"no recorded exchange for {request.method} {request.path}"}, status=599
            )
        answer = exchange["response"]
        response = web.StreamResponse(status=answer.get("status", 200), headers=answer.get("headers", {}))
        await response.prepare(request)
        for chunk in answer.get("chunks", []):
            await response.write(chunk.encode() if isinstance(chunk, str) else bytes(chunk))
            await asyncio.sleep(0)  # each chunk its own write on the wire
        if answer.get("cut"):
            assert request.transport is not None
            request.transport.close()  # a server killed mid-stream: no terminating chunk
            return response
        await response.write_eof()
        return response
