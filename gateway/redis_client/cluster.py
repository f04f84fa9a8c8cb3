"""ClusterClient: RespClient's ``execute`` over a Redis Cluster, one pipelined connection per node.

One connection per node by default, or a RespPool (pool.py) of ``num_connections``. The slot map
comes from ``CLUSTER SLOTS`` (asked of the seed nodes, then of any known node). Each
command goes to the primary of its keys' slot (slots.py; keys in two slots are refused before
sending). Redirects are followed as Redis Cluster's spec says: ``-MOVED slot host:port`` (the slot
moved for good: note it and refresh the whole map in the background), ``-ASK slot host:port`` (the
slot is migrating: send ``ASKING`` and the command to that node, once), ``-TRYAGAIN`` (a multi-key
command met a slot half migrated: wait a moment and send again). Each of these replies means the
command did not run, so following it never applies a script twice. Keyless commands: ``SCRIPT``,
``FLUSHDB``, ``FLUSHALL`` go to every primary; the rest (``PING``) to one. ``SCAN`` is per node: walk
``primaries()`` (RespCommands.scan_iter does).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from gateway.redis_client.pool import RespPool
from gateway.redis_client.resp import RespClient, RespError
from gateway.redis_client.slots import NUM_SLOTS, command_keys, slot_of_keys
from gateway.redis_client.url import Address, RedisTarget, parse_url

MAX_REDIRECTS = 16
"""Redirects (and TRYAGAIN waits) one command may follow before its error is raised."""

_TO_EVERY_PRIMARY = {b"SCRIPT", b"FLUSHDB", b"FLUSHALL"}


def _address(text: str, default_host: str) -> Address:
    host, _, port = text.rpartition(":")
    return (host or default_host), int(port)


class ClusterClient:
    """Commands routed over a Redis Cluster (see the module docstring); ``execute`` as RespClient's."""

    def __init__(
        self, url_or_target: str | RedisTarget, *, connect_timeout_s: float = 1.0, num_connections: int = 1
    ) -> None:
        target = parse_url(url_or_target) if isinstance(url_or_target, str) else url_or_target
        self.target = target
        self.connect_timeout_s = connect_timeout_s
        self.num_connections = num_connections
        """Connections to each node (a RespPool when more than one)."""
        self._nodes: dict[Address, RespClient | RespPool] = {}
        self._slots: list[Address | None] = [None] * NUM_SLOTS
        self._refreshing: asyncio.Task[None] | None = None
        self._loaded: asyncio.Future[None] | None = None

    def node(self, address: Address) -> RespClient | RespPool:
        """The connection(s) to ``address`` (made on first use, kept)."""
        client = self._nodes.get(address)
        if client is None:
            target, timeout_s = self.target.node(address), self.connect_timeout_s
            if self.num_connections > 1:
                client = RespPool(target, num_connections=self.num_connections, connect_timeout_s=timeout_s)
            else:
                client = RespClient(target, connect_timeout_s=timeout_s)
            self._nodes[address] = client
        return client

    async def refresh(self) -> None:
        """Read the slot map again, from the first node (known ones first, then the seeds) that answers."""
        errors: list[str] = []
        candidates = list(dict.fromkeys([*self._nodes, *self.target.addresses]))
        for address in candidates:
            try:
                slots = await self.node(address).execute("CLUSTER", "SLOTS")
            except (OSError, RespError) as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
                continue
            table: list[Address | None] = [None] * NUM_SLOTS
            for start, end, primary, *_replicas in slots:
                host = primary[0].decode() if primary[0] else address[0]
                table[start : end + 1] = [(host, int(primary[1]))] * (end - start + 1)
            self._slots = table
            return
        raise ConnectionError(f"no Redis Cluster node gave the slot map: {'; '.join(errors)}")

    async def _ensure_map(self) -> None:
        if self._loaded is None or (self._loaded.done() and self._loaded.exception() is not None):
            self._loaded = asyncio.ensure_future(self.refresh())
        await asyncio.shield(self._loaded)

    def _refresh_soon(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        with contextlib.suppress(OSError, RespError):
            await self.refresh()

    async def primaries(self) -> list[RespClient]:
        """A connection to every primary that holds slots."""
        await self._ensure_map()
        addresses = dict.fromkeys(a for a in self._slots if a is not None)
        return [node for address in addresses for node in (await self.node(address).primaries())]

    async def execute(self, *args: Any) -> Any:
        """Send one command to the node of its slot, following redirects; its reply."""
        if self._loaded is None or not self._loaded.done() or self._loaded.exception() is not None:
            await self._ensure_map()
        name = args[0].upper().encode() if isinstance(args[0], str) else bytes(args[0]).upper()
        if name in _TO_EVERY_PRIMARY:
            replies = await asyncio.gather(*(node.execute(*args) for node in await self.primaries()))
            return replies[0]
        slot = slot_of_keys(command_keys(args))  # CrossSlotError before anything is sent
        address = self._slots[slot] if slot is not None else None
        if address is None:
            address = next((a for a in self._slots if a is not None), self.target.addresses[0])
        asking = False
        for attempt in range(MAX_REDIRECTS):
            node = self.node(address)
            try:
                return await (node.execute_asking(*args) if asking else node.execute(*args))
            except RespError as error:
                kind, _, rest = str(error).partition(" ")
                if kind == "MOVED":  # the slot lives there now
                    slot_text, _, where = rest.partition(" ")
                    address = _address(where, address[0])
                    self._slots[int(slot_text)] = address
                    self._refresh_soon()
                    asking = False
                elif kind == "ASK":  # migrating: this one command goes there, after ASKING
                    address = _address(rest.partition(" ")[2], address[0])
                    asking = True
                elif kind in ("TRYAGAIN", "CLUSTERDOWN"):  # half-migrated keys, or a failover under way
                    await asyncio.sleep(min(0.1, 0.002 * 2**attempt))
                    if kind == "CLUSTERDOWN":
                        self._refresh_soon()
                else:
                    raise
            except ConnectionError:
                self._refresh_soon()  # the node may have failed over: the next call finds the new one
                raise
        raise RespError(f"gave up after {MAX_REDIRECTS} redirects: {args[0]!r} to {address[0]}:{address[1]}")

    async def close(self) -> None:
        for task in (self._refreshing, self._loaded):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        for client in self._nodes.values():
            await client.close()
        self._nodes.clear()
