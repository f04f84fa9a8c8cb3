"""The KV-aware pick end to end, without sockets: events applied to the index, the pool's tokenizer, the
pick stage choosing the replica that holds the prompt's head and saying so, and affinity hashing,
unchanged, wherever no KV events flow."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
import zmq.asyncio

from gateway.cache import MemoryAffinityMap, cache_salt
from gateway.compiled import CompiledPolicy
from gateway.kv_routing.events import decode_batch
from gateway.kv_routing.index import BlockIndex
from gateway.kv_routing.router import MAX_REASON_CHARS, KvRouter, kv_route_reason
from gateway.kv_routing.tokenizer import PromptTokenizer, TokenizerCache
from gateway.policy import PolicyError, parse_policy
from gateway.policy.kv_events import KvRoutingConfig
from gateway.stages.pick import PickReplica
from tests.support.calls import balancer_for, build_call, compile_doc, policy_doc
from tests.support.kv_events import KvPublisher, batch, stored
from tests.support.tiny_tokenizer import tokenizer_dir

SYSTEM = {"role": "system", "content": " ".join(["be brief"] * 12)}
BODY = {"model": "small", "messages": [SYSTEM, {"role": "user", "content": "hi"}]}
SOURCES = {"small-0": {"endpoint": "tcp://127.0.0.1:5557"}, "small-1": {"endpoint": "tcp://127.0.0.1:5558"}}


def kv_policy(tokenizer: Path, **pool: Any) -> CompiledPolicy:
    kv = {"pools": {"small": {"tokenizer": str(tokenizer), "replicas": SOURCES, **pool}}}
    return compile_doc(policy_doc(num_replicas=2, kv_routing=kv, cache={"affinity": {"chunk_bytes": 16}}))


async def router_for(tokenizer: Path, decisions: list[tuple[str, str]]) -> KvRouter:
    tokenizers = TokenizerCache()
    await tokenizers.load(str(tokenizer))
    return KvRouter(index=BlockIndex(), tokenizers=tokenizers, on_decision=lambda *d: decisions.append(d))


def hold(
    router: KvRouter,
    label: str,
    token_ids: list[int],
    num_blocks: int,
    block_size: int = 4,
    cache_salt: str | None = None,
) -> None:
    """``label``'s engine stored the first ``num_blocks`` blocks of ``token_ids`` (for ``cache_salt``)."""
    hashes = [f"{label}-{cache_salt}-{i}" for i in range(num_blocks)]
    extra_keys = None if cache_salt is None else [[cache_salt]] + [None] * (num_blocks - 1)
    event = stored(hashes, None, token_ids[: num_blocks * block_size], block_size, extra_keys=extra_keys)
    router.index.apply(("small", label), decode_batch(batch([event])))


@pytest.fixture
def tokenizer(tmp_path: Path) -> Path:
    return tokenizer_dir(tmp_path)


async def test_the_pick_goes_to_the_replica_holding_the_prefix_and_says_so(tokenizer: Path) -> None:
    decisions: list[tuple[str, str]] = []
    router = await router_for(tokenizer, decisions)
    token_ids = PromptTokenizer.from_dir(tokenizer).prompt_ids(BODY)
    assert token_ids is not None and len(token_ids) // 4 == 8
    hold(router, "small-0", token_ids, 2)
    hold(router, "small-1", token_ids, 6)
    compiled = kv_policy(tokenizer)
    events: list[str] = []
    pick = PickReplica(balancer_for(compiled), MemoryAffinityMap(), on_event=events.append, kv=router)
    for _ in range(2):  # round robin alone would alternate
        call = build_call(compiled, BODY)
        call.route_reason = "pool"
        await pick(call)
        assert call.replica is not None and call.replica.label == "small-1"
        assert call.route_reason == "pool; kv:6/8 blocks@small-1"
        assert call.response_headers["x-sortyard-route-reason"] == call.route_reason
    assert decisions == [("small", "hit"), ("small", "hit")] and events == []  # affinity never asked


async def test_only_blocks_cached_for_the_tenants_own_salt_count(tokenizer: Path) -> None:
    decisions: list[tuple[str, str]] = []
    router = await router_for(tokenizer, decisions)
    token_ids = PromptTokenizer.from_dir(tokenizer).prompt_ids(BODY)
    assert token_ids is not None
    document = policy_doc(
        num_replicas=2,
        kv_routing={"pools": {"small": {"tokenizer": str(tokenizer), "replicas": SOURCES}}},
        cache={"affinity": {"chunk_bytes": 16}},
    )
    for replica in document["pools"]["small"]["replicas"]:
        replica["send_cache_salt"] = True
    compiled = compile_doc(document)
    pick = PickReplica(
        balancer_for(compiled), MemoryAffinityMap(), kv=router, environ={"SORTYARD_CACHE_SALT_SECRET": "s"}
    )
    salt_of = {tenant: cache_salt(tenant, "s") for tenant in ("north", "south")}
    hold(router, "small-0", token_ids, 6, cache_salt=salt_of["north"])
    hold(router, "small-1", token_ids, 2, cache_salt=salt_of["south"])
    for tenant, label, held in (("north", "small-0", 6), ("south", "small-1", 2)):
        call = build_call(compiled, BODY, tenant=tenant)
        await pick(call)
        assert call.replica is not None and call.replica.label == label
        assert (call.route_reason or "").endswith(f"kv:{held}/8 blocks@{label}"), call.route_reason
        assert call.body["cache_salt"] == salt_of[tenant]
    call = build_call(compiled, BODY, tenant="west")  # the same prompt, cached only for others
    await pick(call)
    assert (call.route_reason or "").endswith("kv:0/8 blocks"), call.route_reason
    assert decisions[-1] == ("small", "miss")


async def test_nobody_holding_the_prefix_leaves_the_choice_to_the_balancer(tokenizer: Path) -> None:
    decisions: list[tuple[str, str]] = []
    router = await router_for(tokenizer, decisions)
    hold(router, "small-0", list(range(500, 540)), 4)  # another prompt's blocks: events flow
    compiled = kv_policy(tokenizer)
    pick = PickReplica(balancer_for(compiled), MemoryAffinityMap(), kv=router)
    labels = set()
    for _ in range(2):
        call = build_call(compiled, BODY)
        await pick(call)
        assert call.replica is not None and call.route_reason == "kv:0/8 blocks"
        labels.add(call.replica.label)
    assert labels == {"small-0", "small-1"} and decisions == [("small", "miss")] * 2


async def test_without_events_the_pick_falls_back_to_affinity_hashing(tokenizer: Path) -> None:
    decisions: list[tuple[str, str]] = []
    router = await router_for(tokenizer, decisions)
    compiled = kv_policy(tokenizer)
    events: list[str] = []
    pick = PickReplica(balancer_for(compiled), MemoryAffinityMap(), on_event=events.append, kv=router)
    labels = []
    for _ in range(3):
        call = build_call(compiled, BODY)
        await pick(call)
        assert call.replica is not None and "x-sortyard-route-reason" not in call.response_headers
        labels.append(call.replica.label)
        await call.finish()  # records the prefix -> replica mapping
    assert labels[0] == labels[1] == labels[2]
    assert events == ["affinity_miss", "affinity_hit", "affinity_hit"] and decisions == []


async def test_the_router_answers_none_where_kv_events_cannot_steer(tokenizer: Path) -> None:
    router = KvRouter(index=BlockIndex(), tokenizers=TokenizerCache())
    compiled = kv_policy(tokenizer)
    config = compiled.policy.kv_routing
    candidates = [("small-0", 0.0), ("small-1", 0.0)]
    assert await router.choose(config, "other", BODY, candidates) is None  # no kv_routing for that pool
    assert await router.choose(config, "small", BODY, candidates) is None  # no events yet
    hold(router, "small-0", list(range(8)), 2)
    assert await router.choose(config, "small", BODY, candidates) is None  # the tokenizer is still loading
    await router.tokenizers.load(str(tokenizer))
    assert await router.choose(config, "small", {"input": "a Responses call"}, candidates) is None
    disabled = kv_policy(tokenizer, enabled=False).policy.kv_routing
    assert await router.choose(disabled, "small", BODY, candidates) is None
    choice = await router.choose(config, "small", BODY, candidates)
    assert choice is not None and choice.outcome == "miss"


async def test_the_router_follows_the_policy_and_imports_zmq_only_when_needed(tokenizer: Path) -> None:
    router = KvRouter()
    router.update(compile_doc(policy_doc()).policy.kv_routing)
    assert router.subscriber is None
    router.start()
    router.update(kv_policy(tokenizer).policy.kv_routing)
    assert router.subscriber is not None and router.subscriber.is_following(("small", "small-1"))
    await router.stop()
    assert not router.subscriber.is_following(("small", "small-1"))


def test_a_retry_replaces_the_kv_reason_and_keeps_the_pools() -> None:
    assert kv_route_reason(None, "kv:1/2 blocks@a") == "kv:1/2 blocks@a"
    assert kv_route_reason("alias; kv:1/2 blocks@a", "kv:0/2 blocks@b") == "alias; kv:0/2 blocks@b"
    assert kv_route_reason("kv:1/2 blocks@a", "kv:2/2 blocks@b") == "kv:2/2 blocks@b"


def test_the_kv_reason_is_a_header_value_whatever_the_replica_is_called() -> None:
    """Printable ASCII, at most 120 characters, the KV pick whole: a label may be any text."""
    assert kv_route_reason("pool", "kv:3/4 blocks@副本-0") == "pool; kv:3/4 blocks@?-0"
    long_label = "r" * 110
    reason = kv_route_reason("tier medium (score 0.61); alias", f"kv:3/4 blocks@{long_label}")
    assert len(reason) == MAX_REASON_CHARS and reason.endswith(long_label[-50:])
    reason.encode("ascii")
    assert kv_route_reason("x" * 200, "kv:1/2 blocks@a") == "x" * 103 + "; kv:1/2 blocks@a"


@pytest.mark.parametrize(
    ("kv", "problem"),
    [
        ({"pools": {"nope": {"tokenizer": "t", "replicas": {}}}}, "kv_routing.pools.nope: unknown pool"),
        (
            {"pools": {"small": {"tokenizer": "t", "replicas": {"x": {"endpoint": "tcp://h:1"}}}}},
            "kv_routing.pools.small.replicas.x: unknown replica",
        ),
        (
            {"pools": {"small": {"tokenizer": "t", "replicas": {"small-0": {"endpoint": "http://h"}}}}},
            "kv_routing.pools.small.replicas.small-0.endpoint: expected a tcp://",
        ),
        (
            {"pools": {"small": {"tokenizer": "t", "replicas": {"small-1": {"endpoint": "tcp://*:5557"}}}}},
            "kv_routing.pools.small.replicas.small-1.endpoint: expected the engine's host",
        ),
        ({"pools": {"small": {"tokenizer": "t", "replicas": {}, "colour": 1}}}, "unknown field `colour`"),
    ],
)
def test_the_policy_refuses_what_it_cannot_serve(kv: dict[str, Any], problem: str) -> None:
    with pytest.raises(PolicyError, match=problem.replace(".", r"\.").replace("`", ".")):
        parse_policy(policy_doc(num_replicas=2, kv_routing=kv), "test")


def test_the_documented_policy_block_is_a_valid_kv_routing_section() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "routing.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if b.startswith("kv_routing:"))
    config = msgspec.convert(yaml.safe_load(block)["kv_routing"], KvRoutingConfig, strict=True)
    assert set(config.pools["large"].replicas) == {"large-0", "large-1"}


async def test_events_over_zeromq_steer_the_pick(tokenizer: Path) -> None:
    """The whole path: an engine's publisher, the router's subscriber, the pick stage."""
    context = zmq.asyncio.Context()
    try:
        async with KvPublisher(context) as publisher:
            source = {"endpoint": publisher.endpoint, "replay_endpoint": publisher.replay_endpoint}
            kv = {"pools": {"small": {"tokenizer": str(tokenizer), "replicas": {"small-1": source}}}}
            compiled = compile_doc(policy_doc(num_replicas=2, kv_routing=kv))
            router = KvRouter(socket_factory=context.socket)
            router.update(compiled.policy.kv_routing)
            router.start()
            await router.tokenizers.load(str(tokenizer))
            token_ids = PromptTokenizer.from_dir(tokenizer).prompt_ids(BODY)
            assert token_ids is not None
            deadline = time.monotonic() + 5.0
            while router.index.num_blocks(("small", "small-1")) < 3:  # a SUB joins a little late
                assert time.monotonic() < deadline, "no events arrived"
                publisher.restart()  # each try starts a fresh engine life: seq 0, nothing held before
                await publisher.publish([stored(["x0", "x1", "x2"], None, token_ids[:12], 4)])
                await asyncio.sleep(0.01)
            pick = PickReplica(balancer_for(compiled), MemoryAffinityMap(), kv=router)
            for _ in range(2):
                call = build_call(compiled, BODY)
                await pick(call)
                assert call.replica is not None and call.replica.label == "small-1"
                assert call.route_reason == "kv:3/8 blocks@small-1"
            await router.stop()
    finally:
        context.destroy(linger=0)
