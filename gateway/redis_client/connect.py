"""open_client: the right client for a Redis URL (one node, Sentinel's primary, or a Cluster)."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.redis_client.cluster import ClusterClient
from gateway.redis_client.pool import RespPool
from gateway.redis_client.resp import RespClient
from gateway.redis_client.url import RedisTarget, parse_url


class Connection(Protocol):
    """What RespClient and ClusterClient both offer: a pipelined ``execute`` and the key-holding nodes."""

    async def execute(self, *args: Any) -> Any: ...

    async def primaries(self) -> list[RespClient]: ...

    async def close(self) -> None: ...


def open_client(
    url_or_target: str | RedisTarget, *, connect_timeout_s: float = 1.0, num_connections: int = 1
) -> RespClient | RespPool | ClusterClient:
    """A client for ``url_or_target`` (url.py has the forms), connected on its first call, with
    ``num_connections`` to each node (pool.py says when more than one pays)."""
    target = parse_url(url_or_target) if isinstance(url_or_target, str) else url_or_target
    if target.mode == "cluster":
        return ClusterClient(target, connect_timeout_s=connect_timeout_s, num_connections=num_connections)
    if num_connections > 1:
        return RespPool(target, num_connections=num_connections, connect_timeout_s=connect_timeout_s)
    return RespClient(target, connect_timeout_s=connect_timeout_s)
