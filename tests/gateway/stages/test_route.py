"""The route stage: model -> pool, with the reason, key restrictions and the tier classifier."""

from __future__ import annotations

import pytest

from gateway.cache import MemoryBlobs
from gateway.errors import ModelNotFound, NotFound
from gateway.pipeline import Endpoint
from gateway.stages.route import RouteModel
from tests.support.calls import api_key, build_call, compile_doc, policy_doc

SMALL_ONLY, STANZA = api_key("acme", pools=["small"])
RULES = {"kind": "rules", "rules": [{"pool": "large", "keywords": ["prove"]}], "fallback_pool": "small"}
COMPILED = compile_doc(
    policy_doc(
        "small", "large", aliases={"gpt-4o-mini": "small", "router": "auto"}, keys=[STANZA], classifier=RULES
    )
)


def _ask(model: str, content: str = "hi") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


@pytest.mark.parametrize(
    ("model", "pool", "reason"), [("large", "large", "pool"), ("gpt-4o-mini", "small", "alias")]
)
async def test_a_pool_or_an_alias_routes_directly(model: str, pool: str, reason: str) -> None:
    call = build_call(COMPILED, _ask(model))
    call.pool = None
    await RouteModel(MemoryBlobs())(call)
    assert (call.pool, call.route_reason) == (pool, reason)
    assert call.response_headers["x-sortyard-route-reason"] == reason


async def test_an_unknown_model_or_one_the_key_may_not_use_is_404() -> None:
    with pytest.raises(ModelNotFound, match="gpt-5"):
        await RouteModel(MemoryBlobs())(build_call(COMPILED, _ask("gpt-5")))
    with pytest.raises(ModelNotFound, match="large"):
        await RouteModel(MemoryBlobs())(build_call(COMPILED, _ask("large"), key=SMALL_ONLY))


async def test_auto_asks_the_classifier_and_explains() -> None:
    route = RouteModel(MemoryBlobs())
    hard = build_call(COMPILED, _ask("auto", "please prove this theorem"), tenant="a")
    await route(hard)
    easy = build_call(COMPILED, _ask("router", "hello there"), tenant="b")
    await route(easy)
    assert (hard.pool, easy.pool) == ("large", "small")
    assert hard.route_reason and "prove" in hard.route_reason


async def test_a_key_limited_to_small_gets_its_nearest_allowed_pool() -> None:
    call = build_call(COMPILED, _ask("auto", "please prove this theorem"), key=SMALL_ONLY)
    await RouteModel(MemoryBlobs())(call)
    assert call.pool == "small" and call.route_reason and call.route_reason.endswith("key allows small")


async def test_a_conversation_keeps_the_tier_its_first_turn_got() -> None:
    route = RouteModel(MemoryBlobs())
    first = [{"role": "user", "content": "please prove this theorem"}]
    call = build_call(COMPILED, {"model": "auto", "messages": first}, tenant="acme")
    await route(call)
    assert call.pool == "large"
    later = [*first, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "thanks"}]
    call = build_call(COMPILED, {"model": "auto", "messages": later}, tenant="acme")
    await route(call)
    assert call.pool == "large" and call.route_reason and call.route_reason.startswith("sticky conversation")
    other = build_call(COMPILED, {"model": "auto", "messages": later}, tenant="globex")
    await route(other)
    assert other.pool == "small"  # another tenant's conversation is its own


async def test_a_responses_request_is_classified_by_its_input() -> None:
    call = build_call(COMPILED, {"model": "auto", "input": "please prove this"}, endpoint=Endpoint.RESPONSES)
    call.pool = None
    await RouteModel(MemoryBlobs())(call)
    assert call.pool == "large"
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    call = build_call(COMPILED, {"model": "router", "input": items}, endpoint=Endpoint.RESPONSES)
    call.pool = None
    await RouteModel(MemoryBlobs())(call)
    assert call.pool == "small"


async def test_a_passthrough_route_must_be_one_the_pool_declares() -> None:
    pools = {
        name: {"replicas": [{"base_url": f"http://{name}-0.test/v1", "model": name}], **extra}
        for name, extra in (("small", {"passthrough_routes": ["/tokenize"]}), ("large", {}))
    }
    compiled = compile_doc(policy_doc(pools=pools))
    for model, path in (("small", "/tokenize"), ("large", "/tokenize"), ("small", "/detokenize")):
        call = build_call(compiled, {"model": model, "prompt": "hi"}, endpoint=Endpoint.PASSTHROUGH)
        call.pool, call.path = None, path
        if (model, path) == ("small", "/tokenize"):
            await RouteModel(MemoryBlobs())(call)
            assert call.pool == "small"
        else:
            with pytest.raises(NotFound, match=f"`{model}` does not serve {path}"):
                await RouteModel(MemoryBlobs())(call)
