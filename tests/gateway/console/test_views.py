"""gateway/console/views.py: the console's JSON answers, built from a balancer, a policy and a reloader."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import yaml

from gateway.console.views import ExplainRequest, explain, policy_view, pools_view, without_credentials
from gateway.errors import NotFound
from gateway.reloader import PolicyReloader
from gateway.replicas.balancer import Balancer
from tests.support.calls import api_key, compile_doc, policy_doc

LEARNED = {"kind": "learned"}


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pools_show_each_replica_with_health_breaker_load_and_latency() -> None:
    compiled = compile_doc(
        policy_doc(
            "small",
            "large",
            num_replicas=2,
            routing={"breaker": {"failure_threshold": 1}, "pools": {"large": {"fallbacks": ["small"]}}},
        )
    )
    clock = Clock()
    balancer = Balancer(clock=clock)
    balancer.update(compiled.policy)
    up, down = balancer.replicas("small")
    up.acquire()
    balancer.record_success(up, 0.012)
    balancer.record_success(up, 0.030)
    balancer.record_failure(down)  # one failure opens it (failure_threshold: 1)

    view = pools_view(balancer, compiled)

    assert [pool.name for pool in view.data] == ["small", "large"]
    small, large = view.data
    assert large.fallbacks == ["small"] and small.fallbacks == []
    assert small.strategy == "least_outstanding" and not small.saturated
    first, second = small.replicas
    assert (first.label, first.model, first.base_url) == ("small-0", "served-small", "http://small-0.test/v1")
    assert (first.healthy, first.breaker, first.outstanding, first.load) == (True, "closed", 1, 1.0)
    assert (first.num_requests, first.num_successes, first.num_failures) == (1, 2, 0)
    assert (first.latency.num_samples, first.latency.p50_ms, first.latency.max_ms) == (2, 12.0, 30.0)
    assert (second.healthy, second.breaker, second.num_failures) == (False, "open", 1)
    assert second.latency.num_samples == 0
    clock.now += 3600  # the breaker's open_s passed: it lets a trial through
    assert pools_view(balancer, compiled).data[0].replicas[1].breaker == "half_open"


def test_pools_never_show_url_credentials() -> None:
    document = policy_doc("small")
    document["pools"]["small"]["replicas"] = [{"base_url": "http://bob:hunter2@h.test:8000/v1", "model": "m"}]
    compiled = compile_doc(document)
    balancer = Balancer()
    balancer.update(compiled.policy)
    text = msgspec.json.encode(pools_view(balancer, compiled)).decode()
    assert "hunter2" not in text and "bob" not in text
    assert "http://***@h.test:8000/v1" in text


def test_without_credentials() -> None:
    assert without_credentials("redis://:pw@r:6379/0") == "redis://***@r:6379/0"
    assert without_credentials("http://h:8000/v1") == "http://h:8000/v1"
    assert without_credentials("not a url") == "not a url"


def test_explain_uses_the_serving_classifier() -> None:
    compiled = compile_doc(policy_doc("small", "medium", "large", classifier=LEARNED))
    answer = explain(compiled, ExplainRequest(prompt="Prove that there are infinitely many primes."))
    assert answer.pool == "large" and answer.reason.startswith("learned p(large)=")
    assert answer.probabilities is not None and set(answer.probabilities) == {"small", "medium", "large"}
    assert (answer.classifier, answer.auto_model) == ("learned", "auto")
    assert answer.latency_ms >= 0


def test_explain_reads_the_system_prompt_tools_and_json_mode() -> None:
    rules = {
        "kind": "rules",
        "fallback_pool": "small",
        "rules": [{"pool": "large", "tools": True, "name": "tools"}, {"pool": "medium", "json_mode": True}],
    }
    compiled = compile_doc(policy_doc("small", "medium", "large", classifier=rules))
    assert explain(compiled, ExplainRequest(prompt="hi")).pool == "small"
    assert explain(compiled, ExplainRequest(prompt="hi", tools=True)).pool == "large"
    assert explain(compiled, ExplainRequest(prompt="hi", system="be terse", json_mode=True)).pool == "medium"


def test_explain_without_a_classifier_is_not_found() -> None:
    with pytest.raises(NotFound) as raised:
        explain(compile_doc(policy_doc("small")), ExplainRequest(prompt="hi"))
    assert raised.value.code == "classifier_not_configured"


def test_the_policy_view_has_no_hashes_and_says_when_it_was_loaded(tmp_path: Path) -> None:
    _, named = api_key("acme", name="ci", admin=True)
    _, unnamed = api_key("acme")
    document = policy_doc("small", keys=[named, unnamed])
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(document))
    reloader = PolicyReloader(path)
    first = policy_view(reloader)
    text = msgspec.json.encode(first).decode()
    assert named["sha256"] not in text and unnamed["sha256"] not in text and "sha256" not in text
    assert [key["name"] for key in first.policy["keys"]] == ["ci", unnamed["sha256"][:12]]
    assert first.policy["pools"]["small"]["replicas"][0]["base_url"] == "http://small-0.test/v1"
    assert (first.source, first.num_reloads, first.num_refused, first.last_error) == (str(path), 0, 0, None)

    path.write_text("pools: {")  # refused: the last good policy keeps serving
    assert not reloader.reload()
    refused = policy_view(reloader)
    assert refused.num_refused == 1 and refused.last_error and refused.loaded_at == first.loaded_at

    path.write_text(yaml.safe_dump(policy_doc("small", "large")))
    assert reloader.reload()
    adopted = policy_view(reloader)
    assert adopted.num_reloads == 1 and adopted.last_error is None
    assert adopted.loaded_at >= first.loaded_at and "large" in adopted.policy["pools"]
