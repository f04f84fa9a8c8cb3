"""KV-cache-aware picks with real processes: two reference engines publishing KV events, a gateway
following them, the openai SDK in front.

A multi-turn conversation (each turn repeats the earlier ones) goes, from its second turn on, to the
replica that prefilled the first, which finds the prompt's head in its prefix cache; the route reason
names that replica's blocks and the decision metric counts hits. The replicas take each tenant's cache
salt: another tenant sending the same conversation finds none of those blocks, at the gateway and at
the engine, until its own copy is cached. Restarting that engine on the same
ports makes the gateway forget its blocks once the restarted engine's events start again from 0: the
conversation's next turn falls back (no replica holds a block), and the turn after is a KV hit again.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.kv_routing.index import PromptChain
from gateway.kv_routing.router import KvRouter
from gateway.stages.pick import PickReplica
from tests.backends.engine.tiny import build_tiny_model
from tests.support.calls import api_key
from tools.servers.engine_process import EngineProcess
from tools.servers.gateway_server import GatewayServer, write_policy

pytestmark = pytest.mark.slow
POOL = "small"
SYSTEM = "You are the support desk of a bicycle shop. " * 6  # ~16 blocks of 16 byte-tokens
NORTH, SOUTH = api_key("north"), api_key("south")
"""Two tenants' keys: the replicas take each tenant's cache salt."""


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def _pick(server: GatewayServer) -> PickReplica:
    """The gateway's pick stage: its KV router, to wait for the index to catch up with events."""
    for stage in server.gateway.pipeline.stages:
        pick = getattr(stage, "pick", None)
        if isinstance(pick, PickReplica) and isinstance(pick.kv, KvRouter):
            return pick
    raise AssertionError("no KV router in the pipeline")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("kv-routing")
    model = build_tiny_model(tmp / "tiny", "gqa")
    shared = ("--max-model-len", "1024", "--kv-cache-bytes", str(4 << 20))
    engines = {
        label: EngineProcess(
            str(model),
            name="tiny",
            log_path=tmp / f"{label}.log",
            tokenizer_dir=tmp / f"tok-{label}",
            extra_args=shared,
        )
        for label in ("a", "b")
    }
    for engine in engines.values():
        engine.start()
    server: GatewayServer | None = None
    try:
        for engine in engines.values():
            engine.wait_ready()
        policy = write_policy(
            tmp / "policy.yaml",
            {
                "version": 1,
                "pools": {
                    POOL: {
                        "replicas": [
                            {
                                "base_url": f"{e.url}/v1",
                                "model": "tiny",
                                "name": label,
                                "send_cache_salt": True,
                            }
                            for label, e in engines.items()
                        ]
                    }
                },
                "aliases": {"gpt-4o-mini": POOL},
                "auth": {"required": True},
                "keys": [NORTH[1], SOUTH[1]],
                "cache": {"response": {"enabled": False}},  # a repeated prompt goes to an engine
                "store": {"url_env": None},
                "kv_routing": {
                    "pools": {
                        POOL: {
                            "tokenizer": str(tmp / "tok-a"),
                            "replicas": {label: e.kv_source for label, e in engines.items()},
                        }
                    }
                },
            },
        )
        server = GatewayServer(policy).start()
        pick = _pick(server)
        assert pick.kv is not None
        router = pick.kv
        assert server.loop is not None  # load the tokenizer now, on the gateway's loop: no turn waits for it
        load = router.tokenizers.load(str(tmp / "tok-a"))
        tokenizer = asyncio.run_coroutine_threadsafe(load, server.loop).result(30)
        assert tokenizer is not None
        client, other = (
            openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)
            for key in (NORTH[0], SOUTH[0])
        )
        yield {
            "engines": engines,
            "server": server,
            "router": router,
            "client": client,
            "other_tenant": other,
            # the salt the gateway gives tenant north (this process's random secret), to look up
            # north's blocks as the gateway does
            "north_salt": pick._salt("north", "SORTYARD_CACHE_SALT_SECRET"),
            "tokenizer": tokenizer,
        }
    finally:
        if server is not None:
            server.stop()
        for engine in engines.values():
            engine.stop()


def _turn(client: openai.OpenAI, messages: list[dict[str, str]]) -> tuple[str, int]:
    """One chat turn: its route reason and the engine's cached prompt tokens."""
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=cast(list[ChatCompletionMessageParam], messages),
        max_tokens=4,
        temperature=0,
    )
    reply = raw.parse()
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    cached = reply.usage.prompt_tokens_details.cached_tokens or 0
    return raw.headers.get("x-sortyard-route-reason", ""), cached


def _kv_reason(reason: str) -> tuple[int, int, str | None]:
    """``(held, total, replica)`` of a route reason's KV part (``alias; kv:21/26 blocks@b``)."""
    found = re.search(r"(?:^|; )kv:(\d+)/(\d+) blocks(?:@(\S+))?$", reason)
    assert found, reason
    return int(found[1]), int(found[2]), found[3]


def _blocks(router: KvRouter) -> dict[str, int]:
    return {label: router.index.num_blocks((POOL, label)) for label in ("a", "b")}


def _grew(router: KvRouter, before: dict[str, int]) -> Callable[[], bool]:
    return lambda: any(n > before[label] for label, n in _blocks(router).items())


def _conversation(name: str) -> Iterator[list[dict[str, str]]]:
    """Turn after turn of one conversation, each repeating the earlier turns (replies fixed, so the
    history re-tokenizes as the engine stored it)."""
    messages = [{"role": "system", "content": f"{name}: {SYSTEM}"}]  # no block shared across
    for n in range(8):
        messages.append({"role": "user", "content": f"Question {n} of {name}: what about gear {n}?"})
        yield list(messages)
        messages.append({"role": "assistant", "content": f"Answer {n}: gear {n} is fine."})


def _hits(server: GatewayServer) -> float:
    text = httpx.get(server.url + "/metrics", timeout=5).text
    lines = [ln for ln in text.splitlines() if ln.startswith("sortyard_kv_route_decisions_total{")]
    hits = [ln for ln in lines if 'outcome="hit"' in ln and f'pool="{POOL}"' in ln]
    return sum(float(ln.rpartition(" ")[2]) for ln in hits)


def _first_turn(stack: dict[str, Any], turns: Iterator[list[dict[str, str]]]) -> str:
    """Send a conversation's first turn; the label of the replica that stored its blocks."""
    router = stack["router"]
    before = _blocks(router)
    _turn(stack["client"], next(turns))
    _wait(_grew(router, before), "the first turn's blocks in the index")
    grown = [label for label, n in _blocks(router).items() if n > before[label]]
    assert len(grown) == 1, grown
    return grown[0]


def test_later_turns_go_to_the_replica_holding_the_conversation(stack: dict[str, Any]) -> None:
    client, router, server = stack["client"], stack["router"], stack["server"]
    hits_before = _hits(server)
    for name in ("alpha", "beta"):
        turns = _conversation(name)
        owner = _first_turn(stack, turns)
        for _ in range(3):
            before = _blocks(router)
            reason, cached = _turn(client, next(turns))
            held, total, label = _kv_reason(reason)
            assert label == owner and 0 < held <= total, reason
            assert cached >= held * 16  # the engine did find them: the request really went there
            _wait(_grew(router, before), "the turn's new blocks in the index")
    _wait(lambda: _hits(server) >= hits_before + 6, "six KV hits counted")


def test_another_tenants_copy_of_a_conversation_holds_no_block_for_it(stack: dict[str, Any]) -> None:
    client, other, router = stack["client"], stack["other_tenant"], stack["router"]
    turns = _conversation("delta")
    owner = _first_turn(stack, turns)
    second = next(turns)
    reason, cached = _turn(client, second)
    assert _kv_reason(reason)[2] == owner and cached > 0, reason
    before = _blocks(router)
    reason, cached = _turn(other, second)  # the same tokens, the other tenant's salt
    assert _kv_reason(reason)[0::2] == (0, None), reason  # nobody holds its blocks: the balancer chose
    assert cached == 0  # and the engine, salting them, agrees
    _wait(_grew(router, before), "the other tenant's blocks in the index")
    reason, cached = _turn(other, second)
    held, _, label = _kv_reason(reason)
    assert held > 0 and label is not None and cached >= held * 16, reason  # now its own copy counts


def test_a_restarted_engine_is_forgotten_then_relearned(stack: dict[str, Any]) -> None:
    client, router, engines = stack["client"], stack["router"], stack["engines"]
    turns = _conversation("gamma")
    owner = _first_turn(stack, turns)
    second = next(turns)
    reason, _ = _turn(client, second)
    assert _kv_reason(reason)[2] == owner, reason
    ids = stack["tokenizer"].prompt_ids({"messages": second})
    assert ids
    chain = PromptChain(
        ids, 16, stack["north_salt"]
    )  # the second turn's blocks, as the gateway looks them up
    _wait(lambda: router.index.num_hits((POOL, owner), chain) == len(chain), "the second turn's blocks")
    engine: EngineProcess = engines[owner]
    engine.kill()
    engine.start().wait_ready()
    numbers = itertools.count()
    last_sent = [0.0]

    def forgotten() -> bool:
        # the restarted engine is idle, so nothing tells the gateway yet: its first events (seq 0
        # again) do; a prompt sent to it directly makes some, and a new one is sent now and then in
        # case the gateway's SUB socket had not reconnected when the last was published
        if router.index.num_hits((POOL, owner), chain) == 0:
            return True
        if time.monotonic() - last_sent[0] > 0.5:
            last_sent[0] = time.monotonic()
            content = f"other {next(numbers)} " * 8
            httpx.post(
                engine.url + "/v1/chat/completions",
                json={"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 1},
                timeout=30,
            ).raise_for_status()
        return False

    _wait(forgotten, "the restarted engine's blocks forgotten")
    before = _blocks(router)
    reason, cached = _turn(client, next(turns))
    assert _kv_reason(reason)[0::2] == (0, None), reason  # nobody holds a block: the balancer chose
    assert cached == 0
    _wait(_grew(router, before), "the fallback turn's blocks in the index")
    reason, cached = _turn(client, next(turns))
    held, _, label = _kv_reason(reason)
    assert held > 0 and label is not None, reason  # relearned
    assert cached >= held * 16
