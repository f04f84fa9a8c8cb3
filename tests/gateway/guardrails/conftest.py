"""A guardrail service on loopback (a tiny aiohttp app) for the webhook tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web


class FakeGuardService:
    """Answers by the text it gets: ``block`` if it holds "forbidden", a redaction of "Alice" (with no
    text on "Bob"), a timeout past any test's limit on "slow", a 500 on "broken"; it records every
    request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        text = body["text"]
        if "slow" in text:
            await asyncio.sleep(30)
        if "broken" in text:
            return web.Response(status=500, text="kaboom")
        if "forbidden" in text:
            return web.json_response({"action": "block", "reason": "policy 7"})
        if "Bob" in text:
            return web.json_response({"action": "redact"})
        if "Alice" in text:
            return web.json_response({"action": "redact", "text": text.replace("Alice", "[NAME]")})
        return web.json_response({"action": "allow"})


@asynccontextmanager
async def running_guard_service() -> AsyncIterator[FakeGuardService]:
    """The service on a free loopback port for the length of the block."""
    service = FakeGuardService()
    app = web.Application()
    app.router.add_post("/check", service.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    service.url = f"http://127.0.0.1:{port}/check"
    try:
        yield service
    finally:
        await runner.cleanup()


@pytest.fixture
async def guard_service() -> AsyncIterator[FakeGuardService]:
    async with running_guard_service() as service:
        yield service
