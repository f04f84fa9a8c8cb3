"""RespPool: a few pipelined connections to one node, each command on the connection of its keys' slot.

Measured (bench/redis_connections.py, docs/scaling.md): on two cores one connection leaves Redis
idle while the client parses a batch of replies and the client idle while Redis runs the next one;
a second connection overlaps the two (~1.6x admits/s), a fourth adds nothing. Commands are spread by
hash slot, not round-robin, so all the commands on one tenant's keys (which share a slot: key_names.py)
keep their order on one connection: the store's writes that must run after an earlier call (lease
releases, credit flushes) still do. Keyless commands (PING, SCRIPT LOAD) use the first connection.
"""

from __future__ import annotations

from typing import Any

from gateway.redis_client.resp import RespClient
from gateway.redis_client.slots import command_keys, key_slot
from gateway.redis_client.url import Address, RedisTarget


class RespPool:
    """``num_connections`` RespClients to one target, used as one (``execute`` as RespClient's)."""

    def __init__(self, target: RedisTarget, *, num_connections: int, connect_timeout_s: float = 1.0) -> None:
        if num_connections < 1:
            raise ValueError("num_connections must be at least 1")
        self.target = target
        self.connections = [
            RespClient(target, connect_timeout_s=connect_timeout_s) for _ in range(num_connections)
        ]

    @property
    def address(self) -> Address | None:
        """The node connected to (Sentinel: the primary the first connection found)."""
        return self.connections[0].address

    def _for(self, args: tuple[Any, ...]) -> RespClient:
        keys = command_keys(args)  # the first key's slot: a standalone node allows keys of several
        return self.connections[key_slot(keys[0]) % len(self.connections) if keys else 0]

    async def execute(self, *args: Any) -> Any:
        return await self._for(args).execute(*args)

    async def execute_asking(self, *args: Any) -> Any:
        return await self._for(args).execute_asking(*args)

    async def primaries(self) -> list[RespClient]:
        return [self.connections[0]]

    async def close(self) -> None:
        for connection in self.connections:
            await connection.close()
