"""InFlight: waiting for open requests, after-response work included, without guessing a time."""

from __future__ import annotations

import asyncio

from gateway.inflight import InFlight


async def test_wait_idle_returns_at_once_when_nothing_is_open() -> None:
    async with asyncio.timeout(1):
        await InFlight().wait_idle()


async def test_wait_idle_waits_for_the_last_request_to_leave() -> None:
    inflight = InFlight()
    inflight.enter()
    inflight.enter()
    waiter = asyncio.ensure_future(inflight.wait_idle())
    inflight.exit()
    await asyncio.sleep(0)
    assert not waiter.done()  # one still open
    inflight.exit()
    async with asyncio.timeout(1):
        await waiter
    assert inflight.num_open == 0


async def test_a_request_entering_before_the_waiter_wakes_keeps_it_waiting() -> None:
    inflight = InFlight()
    inflight.enter()
    waiter = asyncio.ensure_future(inflight.wait_idle())
    await asyncio.sleep(0)
    inflight.exit()
    inflight.enter()  # idle for an instant, busy again before the waiter ran
    await asyncio.sleep(0)
    assert not waiter.done()
    inflight.exit()
    async with asyncio.timeout(1):
        await waiter
