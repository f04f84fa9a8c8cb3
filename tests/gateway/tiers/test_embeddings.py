"""gateway/tiers/embeddings.py: the k-nearest vote on hand-made vectors, the knob, the fallback when
no vector comes (failure, timeout, wrong size), the policy's ``kind: embeddings``, and the route stage
embedding the prompt through a fake embedding pool."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx
import msgspec
import numpy as np
import numpy.typing as npt
import pytest

from gateway.app import create_app
from gateway.cache import MemoryBlobs, MemoryResponseCache
from gateway.policy import PolicyError, parse_policy
from gateway.reloader import PolicyReloader
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.semantic_cache.embedder import QueryEmbedder
from gateway.settings import Settings
from gateway.stages.route import RouteModel
from gateway.tiers import ClassifierConfig, ClassifierLoadError, ClassifyInput, build_classifier
from gateway.tiers.config import EmbeddingsConfig, LearnedConfig, RulesConfig
from gateway.tiers.embeddings import EmbeddingsClassifier, nearest_vote, pick_tier
from gateway.tiers.example_vectors import ExampleVectors, write_vectors
from gateway.tiers.rules import RulesClassifier
from tests.gateway.semantic_cache.fake_upstream import FakeUpstream, toy_vector
from tests.support.calls import balancer_for, build_call, compile_doc, policy_doc

TIERS = ("small", "medium", "large")
POOLS = ["small", "medium", "large", "embed"]
# Three examples a tier on three axes; a fourth axis is shared by medium and large.
EXAMPLES = ExampleVectors(
    vectors=np.asarray(
        [
            *([1, 0, 0, 0], [0.9, 0.1, 0, 0], [1, 0.1, 0, 0.1]),  # small
            *([0, 1, 0, 0], [0, 0.9, 0, 0.3], [0.1, 1, 0, 0]),  # medium
            *([0, 0, 1, 0], [0, 0, 0.9, 0.3], [0, 0.1, 1, 0]),  # large
        ],
        dtype=np.float32,
    ),
    labels=np.repeat(np.arange(3), 3),
    tiers=TIERS,
)
FALLBACK = RulesConfig(fallback_pool="medium")


def unit(*xs: float) -> npt.NDArray[np.float32]:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def classifier(**fields: object) -> EmbeddingsClassifier:
    config = msgspec.convert({"kind": "embeddings", "k": 3, **fields}, EmbeddingsConfig)
    return EmbeddingsClassifier(config, EXAMPLES, RulesClassifier(FALLBACK), pools=POOLS)


def ask(text: str) -> ClassifyInput:
    return ClassifyInput(messages=[{"role": "user", "content": text}])


def test_the_nearest_examples_vote_by_similarity() -> None:
    probs, best = nearest_vote(EXAMPLES, unit(0, 0, 1, 0), k=3)
    assert probs.tolist() == pytest.approx([0.0, 0.0, 1.0])
    assert best == pytest.approx(1.0, abs=1e-6)
    probs, _ = nearest_vote(EXAMPLES, unit(0, 1, 1, 0), k=6)  # between medium and large: half each
    assert probs[0] == 0.0 and probs[1] == pytest.approx(probs[2], abs=0.05)
    probs, best = nearest_vote(EXAMPLES, np.zeros(4, dtype=np.float32), k=3)
    assert best == 0.0 and probs.tolist() == pytest.approx([1 / 3] * 3)


def test_the_largest_tier_that_clears_its_threshold_wins() -> None:
    probs = np.asarray([0.2, 0.5, 0.3])  # p(medium or larger) = 0.8, p(large) = 0.3
    assert pick_tier(probs, [(2, 0.5), (1, 0.5)]) == 1
    assert pick_tier(probs, [(2, 0.25), (1, 0.5)]) == 2
    assert pick_tier(probs, [(2, 0.9), (1, 0.9)]) == 0


def test_decisions_only_move_up_as_the_knob_rises() -> None:
    queries = [unit(1, 1, 0, 0), unit(0, 1, 1, 0), unit(1, 0, 1, 0), unit(0, 1, 0, 1), unit(1, 1, 1, 1)]
    previous = [0] * len(queries)
    for knob in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        c = classifier(cost_quality=knob, k=9)
        chosen = [TIERS.index(c.decide(ask("q"), q).pool) for q in queries]
        assert all(now >= before for now, before in zip(chosen, previous, strict=True))
        previous = chosen
        if knob == 0.0:
            assert chosen == [0] * len(queries)  # 0 never leaves the cheapest tier
    assert previous == [2] * len(queries)  # 1 sends everything to the largest
    mostly_small = unit(1, 0, 0.4, 0)
    assert classifier(k=9).decide(ask("q"), mostly_small).pool == "small"
    assert classifier(k=9, thresholds={"large": 0.1}).decide(ask("q"), mostly_small).pool == "large"


def test_a_decision_says_why() -> None:
    decision = classifier().decide(ask("prove it"), unit(0, 0.1, 1, 0))
    assert decision.pool == "large"
    assert decision.reason.startswith("embeddings p(large)=") and "sim=" in decision.reason
    assert decision.probabilities and set(decision.probabilities) == set(TIERS)


async def test_no_vector_in_time_falls_back_and_says_so() -> None:
    c = classifier(timeout_s=0.01)

    async def hang(text: str) -> npt.NDArray[np.float32] | None:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def fail(text: str) -> npt.NDArray[np.float32] | None:
        return None

    async def wrong_size(text: str) -> npt.NDArray[np.float32] | None:
        return unit(1, 0, 0, 0, 0)

    for embed, why in [
        (hang, "timeout"),
        (fail, "unavailable"),
        (wrong_size, "bad vector"),
        (None, "no embedder"),
    ]:
        decision = await c.classify_async(ask("hello"), embed)
        assert decision.pool == "medium" and decision.reason.startswith(f"embeddings {why}")
        assert decision.reason.endswith("rules no-match fallback")
    assert c.classify(ask("hello")).reason == "embeddings no embedder; rules no-match fallback"
    assert (await classifier(min_similarity=0.99).classify_async(ask("x"), fail)).pool == "medium"
    empty = await c.classify_async(ask("  "), fail)
    assert (empty.pool, empty.reason) == ("small", "embeddings empty-prompt fallback")


async def test_a_vector_below_min_similarity_falls_back() -> None:
    async def tilted(text: str) -> npt.NDArray[np.float32] | None:
        return unit(1, 1, 1, 5)

    decision = await classifier(min_similarity=0.9).classify_async(ask("odd"), tilted)
    assert decision.pool == "medium" and "below-min" in decision.reason


def test_the_policy_section_parses_with_its_defaults() -> None:
    config = msgspec.convert({"kind": "embeddings"}, ClassifierConfig)
    assert isinstance(config, EmbeddingsConfig)
    assert (config.pool, config.timeout_s, config.cost_quality) == ("embed", 0.5, 0.5)
    assert config.fallback == LearnedConfig()
    rules = msgspec.convert({"kind": "embeddings", "fallback": {"kind": "rules"}}, EmbeddingsConfig)
    assert isinstance(rules.fallback, RulesConfig)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"kind": "embeddings", "timeout_s": 0}, EmbeddingsConfig)


def test_the_shipped_examples_build_and_a_missing_pool_is_refused(tmp_path: Path) -> None:
    built = build_classifier(EmbeddingsConfig(), pools=POOLS)
    assert isinstance(built, EmbeddingsClassifier) and built.examples.tiers == TIERS
    with pytest.raises(ClassifierLoadError, match="pool 'embed', which does not exist"):
        build_classifier(EmbeddingsConfig(), pools=TIERS)
    with pytest.raises(ClassifierLoadError, match="thresholds name"):
        build_classifier(EmbeddingsConfig(thresholds={"small": 0.5}), pools=POOLS)
    with pytest.raises(ClassifierLoadError, match="do not exist"):
        build_classifier(EmbeddingsConfig(path=str(tmp_path / "none.npz")), pools=POOLS)


def _routing_policy(path: Path, **fields: object) -> dict[str, object]:
    """Pools small/large/embed; examples on the fake pool's toy vectors (64 dims)."""
    texts = {
        "small": ["hello there friend", "thanks goodbye"],
        "large": ["prove theorem primes", "derive integral"],
    }
    rows = [(text, tier) for tier, items in texts.items() for text in items]
    write_vectors(
        path,
        ExampleVectors(
            vectors=np.asarray([toy_vector(t) for t, _ in rows], dtype=np.float32),
            labels=np.asarray([0 if tier == "small" else 1 for _, tier in rows]),
            tiers=("small", "large"),
        ),
    )
    fallback = {"kind": "rules", "rules": [], "fallback_pool": "small"}
    classifier = {"kind": "embeddings", "path": str(path), "k": 1, "fallback": fallback, **fields}
    return policy_doc("small", "large", "embed", classifier=classifier)


async def test_the_route_stage_embeds_the_prompt_through_the_pool(tmp_path: Path) -> None:
    compiled = compile_doc(_routing_policy(tmp_path / "v.npz"))
    upstream = FakeUpstream()
    route = RouteModel(
        MemoryBlobs(), QueryEmbedder(upstream.client, balancer_for(compiled), MemoryResponseCache())
    )
    call = build_call(
        compiled, {"model": "auto", "messages": [{"role": "user", "content": "prove the theorem"}]}
    )
    await route(call)
    assert call.pool == "large" and call.route_reason == "embeddings p(large)=1.00 sim=0.82"
    assert upstream.embedded == ["prove the theorem"]
    assert upstream.client.requests[0].url == "http://embed-0.test/v1/embeddings"

    def broken(url: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        return Reply.json({"error": {"message": "down"}}, status=503)

    down = RouteModel(
        MemoryBlobs(),
        QueryEmbedder(MemoryUpstreamClient(broken), balancer_for(compiled), MemoryResponseCache()),
    )
    call = build_call(compiled, {"model": "auto", "messages": [{"role": "user", "content": "prove it"}]})
    await down(call)
    assert call.pool == "small" and call.route_reason == "embeddings unavailable; rules no-match fallback"
    call = build_call(compiled, {"model": "auto", "messages": [{"role": "user", "content": "prove it"}]})
    await RouteModel(MemoryBlobs())(call)  # a gateway built without an embedder
    assert call.route_reason == "embeddings no embedder; rules no-match fallback"


def test_a_policy_without_the_embedding_pool_is_refused(tmp_path: Path) -> None:
    document = _routing_policy(tmp_path / "v.npz", pool="vectors")
    with pytest.raises(PolicyError, match="pool 'vectors', which does not exist"):
        compile_doc(document)


def test_the_gateway_side_never_imports_torch() -> None:
    code = (
        "import sys, numpy as np, gateway.stages.route;"
        "from gateway.tiers import build_classifier, EmbeddingsConfig, ClassifyInput;"
        "c = build_classifier(EmbeddingsConfig());"
        "c.decide(ClassifyInput(messages=[{'role': 'user', 'content': 'hi'}]), np.ones(384, np.float32));"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_through_the_app_auto_is_routed_by_the_embedding_pool(tmp_path: Path) -> None:
    upstream = FakeUpstream()
    policy = parse_policy(_routing_policy(tmp_path / "v.npz"), "test")
    app = create_app(
        Settings(), client=upstream.client, reloader=PolicyReloader("unused.yaml", policy=policy)
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        body = {"model": "auto", "messages": [{"role": "user", "content": "derive the integral"}]}
        answer = await client.post("/v1/chat/completions", json=body)
    await app.gateway.caches.close()
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-sortyard-pool"] == "large"
    assert answer.headers["x-sortyard-route-reason"].startswith("embeddings p(large)=1.00")
    assert upstream.embedded == ["derive the integral"] and upstream.asked == ["derive the integral"]
