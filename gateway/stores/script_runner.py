"""ScriptRunner: the package's Lua scripts, each call one bounded EVALSHA.

Scripts (``lua/*.lua``, package files) are called by their SHA1, computed locally, so the first call
needs no SCRIPT LOAD; on NOSCRIPT (a restarted or flushed Redis) the script is loaded and the call
repeated. Every call is bounded by ``timeout_s`` end to end (a ``Deadline``: a loop blocked past it
is not Redis failing to answer); any failure to answer becomes
``StoreUnavailable`` at once (no retries of the call here: the failover wrapper decides what happens
next).

On the fast path (RedisStore's own ``RespClient`` or ``ClusterClient``), calls made in the same
event-loop turn with the same keys (same tenant, same rules) share one EVALSHA: the script takes one
ARGV entry per call and answers each in turn, atomically. At concurrency 16 that is a fraction of the
commands, bytes and parsing. The batch holds the one timer of them all (a timer per call was a quarter
of the client's CPU) and always resolves every caller's future: a reply, or StoreUnavailable.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from gateway.redis_client.commands import RespCommands
from gateway.redis_client.connect import Connection
from gateway.redis_client.deadline import Deadline
from gateway.redis_client.resp import RespError
from gateway.stores.base import StoreUnavailable

Batch = list[tuple[bytes, asyncio.Future[list[Any]]]]
"""The calls of one loop turn with the same script and keys: (spec, the caller's future)."""


class LuaScript:
    """A Lua file of this package, called by SHA1."""

    def __init__(self, name: str) -> None:
        self.source = resources.files("gateway.stores").joinpath("lua", name).read_text(encoding="utf-8")
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()


def _fail(batch: Batch, failure: StoreUnavailable) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(failure)
            future.exception()  # its caller may be gone (cancelled): mark it retrieved


class ScriptRunner:
    """Runs LuaScripts, one bounded EVALSHA per call or per batch (see the module docstring).

    Args:
        client: the connection used when there is no fast one (one EVALSHA per call).
        fast: the hot-path connection, or None; calls through it are batched.
        timeout_s: the most one call (or one batch) may take, connection included.
    """

    def __init__(self, client: RespCommands, fast: Connection | None, *, timeout_s: float) -> None:
        self._client = client
        self._fast = fast
        self.timeout_s = timeout_s
        self._batches: dict[tuple[str, tuple[str, ...]], Batch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, script: LuaScript, keys: Sequence[str], spec: bytes) -> list[Any]:
        """One call's script reply, within ``timeout_s``."""
        if self._fast is not None:
            return await self._enqueue(script, keys, spec)  # the batch bounds the wait by timeout_s
        try:
            async with Deadline(self.timeout_s):
                reply = await self._client.evalsha(script.sha, script.source, keys, spec)  # loads on NOSCRIPT
        except (RespError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"rate-limit store unavailable: {exc!r}") from exc
        return list(reply[0]) if isinstance(reply[0], list) else [reply[0]]

    def run_soon(self, script: LuaScript, keys: Sequence[str], spec: bytes) -> asyncio.Future[list[Any]]:
        """The call, queued now: Redis runs it before any call made after this one (await the result)."""
        if self._fast is not None:
            return self._enqueue(script, keys, spec)
        return asyncio.ensure_future(self.run(script, keys, spec))

    def _enqueue(self, script: LuaScript, keys: Sequence[str], spec: bytes) -> asyncio.Future[list[Any]]:
        """Queue one call into this loop turn's batch for its keys; the batch always settles the future."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        group = (script.sha, tuple(keys))
        batch = self._batches.get(group)
        if batch is None:
            batch = self._batches[group] = []
            loop.call_soon(self._send_batch, script, group)
        batch.append((spec, future))
        return future

    def _send_batch(self, script: LuaScript, group: tuple[str, tuple[str, ...]]) -> None:
        batch = self._batches.pop(group)
        task = asyncio.get_running_loop().create_task(self._run_batch(script, group[1], batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_batch(self, script: LuaScript, keys: tuple[str, ...], batch: Batch) -> None:
        assert self._fast is not None
        specs = [spec for spec, _ in batch]
        try:
            async with Deadline(self.timeout_s):
                try:
                    replies = await self._fast.execute("EVALSHA", script.sha, len(keys), *keys, *specs)
                except RespError as error:
                    if not str(error).startswith("NOSCRIPT"):
                        raise
                    await self._fast.execute("SCRIPT", "LOAD", script.source)  # a fresh or flushed Redis
                    replies = await self._fast.execute("EVALSHA", script.sha, len(keys), *keys, *specs)
        except (RespError, OSError, TimeoutError) as exc:
            _fail(batch, StoreUnavailable(f"rate-limit store unavailable: {exc!r}"))
            return
        except BaseException as exc:  # cancelled (shutdown) or a bug: no caller may wait forever
            _fail(batch, StoreUnavailable(f"rate-limit store call failed: {exc!r}"))
            raise
        if not isinstance(replies, list) or len(replies) != len(batch):
            _fail(batch, StoreUnavailable(f"rate-limit store answered {replies!r} to {len(batch)} calls"))
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if not future.done():
                future.set_result(reply if isinstance(reply, list) else [reply])
