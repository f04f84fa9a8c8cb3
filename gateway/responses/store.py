"""Stored responses of the Responses API: ``ResponseStore`` over ``Blobs`` (Redis or this process).

A stored response is the ``Response`` object the client got and the input items it answered (the
whole conversation: a turn continued with ``previous_response_id`` stores the earlier turns' items
too, so continuing it again reads one key). Keys are per tenant and hash-tagged for Redis Cluster:
``sy:{t:<tenant>}:resp:<id>``; another tenant's id is simply not there. The TTL is the policy's
(``responses.ttl_s``). The store never raises: Redis unreachable reads as not found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.cache.blobs import Blobs

__all__ = ["ResponseStore", "StoredResponse"]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response: the answer and the input items (with ids) it answered."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return str(self.response.get("id", ""))

    def conversation(self) -> list[dict[str, Any]]:
        """What a turn continuing this one starts from: its input items, then its output items."""
        output = self.response.get("output")
        return [*self.input_items, *(output if isinstance(output, list) else [])]


class _Record(msgspec.Struct):
    response: dict[str, Any]
    input: list[dict[str, Any]]


_decoder = msgspec.json.Decoder(_Record)


def key_of(tenant: str, response_id: str) -> str:
    """A stored response's key: per tenant, hash-tagged (one slot per tenant in a Cluster)."""
    return f"sy:{{t:{tenant}}}:resp:{response_id}"


class ResponseStore:
    """Stored responses by tenant and id."""

    def __init__(self, blobs: Blobs) -> None:
        self.blobs = blobs

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        raw = await self.blobs.get(key_of(tenant, response_id))
        if raw is None:
            return None
        try:
            record = _decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return StoredResponse(record.response, record.input)

    async def put(self, tenant: str, stored: StoredResponse, ttl_s: float) -> bool:
        record = _Record(stored.response, stored.input_items)
        return await self.blobs.set(key_of(tenant, stored.id), msgspec.json.encode(record), ttl_s)

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Delete it; False when there was none."""
        key = key_of(tenant, response_id)
        if await self.blobs.get(key) is None:
            return False
        await self.blobs.delete(key)
        return True

    async def close(self) -> None:
        await self.blobs.close()
