"""Build a ``Call`` from a small policy, so a stage runs in a unit test without any server.

::

    compiled = compile_doc(policy_doc("small"))
    call = build_call(compiled, {"model": "small", "messages": USER_HI})
    await RouteModel(MemoryBlobs())(call)
    assert call.pool == "small"

``policy_doc`` gives every pool one replica at ``http://<pool>-<i>.test/v1`` serving ``served-<pool>``;
``api_key`` makes a key and its policy stanza. ``build_call`` decodes the body as the request's owner does
(``gateway.lifecycle.new_call``), sets the pool the route stage would pick, and, given a key's text,
the ``Authorization`` header and (unless ``authenticated=False``) the key and tenant authentication
would find. ``upstream_stage`` ends a pipeline with the real pick, upstream and retry stages over a
``MemoryUpstreamClient``; ``chat_completion`` and ``chat_chunk`` are the bodies an upstream answers
with.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.compiled import CompiledPolicy, compile_policy
from gateway.keys.hashing import hash_key, new_key
from gateway.lifecycle import new_call
from gateway.pipeline import BytesResult, Call, Endpoint, StreamResult
from gateway.policy import parse_policy
from gateway.replicas.balancer import Balancer, ReplicaState
from gateway.replicas.memory_client import MemoryUpstreamClient
from gateway.stages.pick import PickReplica
from gateway.stages.retry import CallWithRetries
from gateway.stages.upstream import CallUpstream

USER_HI: list[dict[str, str]] = [{"role": "user", "content": "hi"}]
"""The smallest chat conversation."""


def served_model(pool: str) -> str:
    """The model name ``policy_doc``'s replicas of ``pool`` serve."""
    return f"served-{pool}"


def policy_doc(*pools: str, num_replicas: int = 1, **sections: Any) -> dict[str, Any]:
    """A policy document with ``pools`` (``small`` when none), each of ``num_replicas`` replicas,
    anonymous callers allowed, no Redis; ``sections`` are added or replace these."""
    document: dict[str, Any] = {
        "pools": {
            pool: {
                "replicas": [
                    {
                        "base_url": f"http://{pool}-{i}.test/v1",
                        "model": served_model(pool),
                        "name": f"{pool}-{i}",
                    }
                    for i in range(num_replicas)
                ]
            }
            for pool in pools or ("small",)
        },
        "auth": {"required": False},
        "store": {"url_env": None},
    }
    document.update(sections)
    return document


def compile_doc(document: Mapping[str, Any]) -> CompiledPolicy:
    """The policy compiled as the gateway serves it (no ``SORTYARD_*`` overrides)."""
    return compile_policy(parse_policy(document, "test"), environ={})


def api_key(tenant: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """A fresh key's text and its ``keys:`` stanza (``fields``: ``pools``, ``limits``, ``priority``...)."""
    text = new_key()
    return text, {"sha256": hash_key(text), "tenant": tenant, **fields}


def build_call(
    policy: CompiledPolicy | Mapping[str, Any],
    body: Mapping[str, Any] | None = None,
    *,
    endpoint: Endpoint = Endpoint.CHAT,
    key: str | None = None,
    authenticated: bool = True,
    tenant: str | None = None,
    headers: Mapping[str, str] | None = None,
    request_id: str = "req-test",
) -> Call:
    """A call as it reaches the stage after auth and route (see the module docstring).

    ``body`` defaults to a chat with ``USER_HI`` for the policy's first pool; ``tenant`` sets the
    tenant of an anonymous (or unauthenticated) call.
    """
    compiled = policy if isinstance(policy, CompiledPolicy) else compile_doc(policy)
    if body is None:
        body = {"model": next(iter(compiled.policy.pools)), "messages": USER_HI}
    names = {name.lower(): value for name, value in (headers or {}).items()}
    if key is not None:
        names["authorization"] = f"Bearer {key}"
    found = compiled.keys.lookup(key) if authenticated and key is not None else None
    raw = msgspec.json.encode(body)
    call = new_call(endpoint, names, raw, compiled, request_id, time.perf_counter(), key=found)
    pool = compiled.policy.pool_for_model(call.model)
    call.pool = pool if pool in compiled.policy.pools else None
    if tenant is not None:
        call.tenant = tenant
    return call


def balancer_for(policy: CompiledPolicy) -> Balancer:
    """A balancer serving ``policy``'s pools."""
    balancer = Balancer()
    balancer.update(policy.policy)
    return balancer


def replica_of(balancer: Balancer, pool: str, index: int = 0) -> ReplicaState:
    """The ``index``-th replica of ``pool``."""
    return balancer.replicas(pool)[index]


def upstream_stage(
    policy: CompiledPolicy, client: MemoryUpstreamClient, balancer: Balancer | None = None
) -> CallWithRetries:
    """The pipeline's last stage (pick a replica, call it, retry) over an in-memory upstream."""
    balancer = balancer or balancer_for(policy)
    return CallWithRetries(PickReplica(balancer), CallUpstream(client, balancer))


async def read_result(result: BytesResult | StreamResult) -> bytes:
    """The whole response body; a stream is read to its end (which finishes its call)."""
    if isinstance(result, BytesResult):
        return result.body
    return b"".join([event async for event in result.events])


def chat_completion(
    model: str, content: str = "Hello.", *, usage: tuple[int, int] = (11, 3)
) -> dict[str, Any]:
    """A chat completion as an OpenAI-compatible upstream answers it."""
    return {
        "id": "chatcmpl-memory",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def chat_chunk(
    model: str, content: str | None = None, *, finish: str | None = None, usage: tuple[int, int] | None = None
) -> dict[str, Any]:
    """One event of a streamed chat completion: a content delta, a finish, or (``usage``) the usage chunk."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-memory",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
    }
    if usage is not None:
        chunk["choices"] = []
        chunk["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    else:
        delta = {"content": content} if content is not None else {}
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return chunk
