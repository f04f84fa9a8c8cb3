"""The scenarios every backend kind passes, through a real gateway, with the official openai SDK.

Each kind's module (``test_tgi.py``, ``test_llamacpp.py``, ...) subclasses ``CompatScenarios`` and
gives a ``target`` fixture: a gateway on loopback whose policy (``compat_policy``) has a pool named
after the kind with one replica, and a ``<kind>-pair`` pool with two replicas balanced
``load_aware``. The backend is a real server where one installs here (vLLM's CPU build, llama.cpp)
or its recorded wire (``tests/support/wire_fake.py``, ``wire/<kind>.json``). The scenarios:

- chat and text completions, plain: text, a finish reason, usage counted by the backend;
- a stream with usage: the same text as the plain answer, usage on the last chunk;
- a stop sequence (taken from the plain answer's text): the text ends before it, finish ``stop``;
- ``max_tokens``: finish ``length`` with exactly that many completion tokens;
- a request only the backend refuses: the client gets the backend's 4xx, OpenAI-shaped;
- the backend dies mid-stream: the client's stream ends with an error, the next request is served;
- load-aware choice: while one replica of the pair reports load, requests go to the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]
PROMPT = "The three primary colours are"


@dataclass
class Target:
    """One kind behind a real gateway."""

    kind: str
    gateway_url: str
    """The gateway's root; the SDK's base URL is this plus ``/v1``."""
    cut: Callable[[], object]
    """Makes the backend die mid-stream for ``cut_request`` (cuts its connections; a no-op where the
    recorded wire is itself cut off)."""
    cut_request: dict[str, Any]
    """``chat.completions.create`` arguments of a long stream (model and stream set by the scenario)."""
    rejected: dict[str, Any]
    """``chat.completions.create`` arguments only the backend refuses (the gateway passes them)."""
    rejected_status: int
    """The status the backend refuses them with."""
    make_busy: Callable[[], AbstractContextManager[Callable[[], bool]]]
    """While entered, the pair's first replica reports load and the gateway has scraped it; it yields
    whether the gateway still weighs that load (a scrape is fresh for three intervals, and a late one
    lets it go stale)."""
    served: Callable[[], tuple[int, int]]
    """Requests each replica of the pair has served so far."""
    model: str = ""
    """What clients ask for: the kind's pool (default: the kind's name)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra ``create`` arguments every scenario sends (a recorded wire matches on them)."""

    def __post_init__(self) -> None:
        self.model = self.model or self.kind

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway_url + "/v1", api_key="unused", max_retries=0, timeout=60)


def compat_policy(kind: str, origin: str, pair: tuple[str, str], **replica: Any) -> dict[str, Any]:
    """A policy with pool ``<kind>`` (one replica at ``origin``) and ``<kind>-pair`` (two, load_aware,
    scraped every 0.1 s); ``replica`` adds fields to each replica (``model``, ``metrics_url``, ...)."""

    def entry(origin: str, name: str, **more: Any) -> dict[str, Any]:
        return {"base_url": origin + "/v1", "kind": kind, "name": name, **replica, **more}

    return {
        "version": 1,
        "timeouts": {"connect_s": 2, "first_byte_s": 60, "idle_s": 30, "total_s": 120},
        "pools": {
            kind: {"replicas": [entry(origin, f"{kind}-0")]},
            f"{kind}-pair": {"replicas": [entry(pair[0], f"{kind}-a"), entry(pair[1], f"{kind}-b")]},
        },
        "routing": {
            "health": {"probe_interval_s": 0},
            "pools": {
                f"{kind}-pair": {
                    "strategy": "load_aware",
                    "health": {"probe_interval_s": 0, "scrape_interval_s": 0.1},
                }
            },
        },
        "auth": {"required": False},
        # every scenario reaches the backend: a greedy repeat would otherwise be a cache hit
        "cache": {"response": {"enabled": False}, "embeddings": {"enabled": False}},
        "retry": {"max_attempts": 1},
        "store": {"url_env": None},
    }


def wait_until(condition: Callable[[], bool], *, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _chat(target: Target, **kwargs: Any) -> Any:
    arguments = {
        "model": target.model,
        "messages": MESSAGES,
        "max_tokens": 16,
        "temperature": 0,
        **target.extra,
    }
    arguments.update(kwargs)
    return target.client().chat.completions.create(**arguments)


class CompatScenarios:
    """The scenarios; a subclass supplies the ``target`` fixture."""

    @pytest.fixture
    def target(self) -> Iterator[Target]:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError
        yield

    def test_chat(self, target: Target) -> None:
        answer = _chat(target)
        choice = answer.choices[0]
        assert isinstance(choice.message.content, str) and choice.message.content
        assert choice.message.role == "assistant"
        assert choice.finish_reason in ("stop", "length")
        assert answer.model == target.model
        usage = answer.usage
        assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    def test_completion(self, target: Target) -> None:
        answer = target.client().completions.create(
            model=target.model, prompt=PROMPT, max_tokens=16, temperature=0, **target.extra
        )
        assert answer.choices[0].text
        assert answer.choices[0].finish_reason in ("stop", "length")
        assert answer.model == target.model
        assert (
            answer.usage is not None and answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0
        )

    def test_stream_with_usage_matches_the_plain_answer(self, target: Target) -> None:
        plain = _chat(target).choices[0].message.content
        stream = _chat(target, stream=True, stream_options={"include_usage": True})
        texts, finish, usage = [], None, None
        for chunk in stream:
            assert chunk.model == target.model
            for choice in chunk.choices:
                texts.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
            usage = chunk.usage or usage
        assert "".join(texts) == plain
        assert finish in ("stop", "length")
        assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0

    def test_stop_sequence_ends_the_text_before_it(self, target: Target) -> None:
        full = _chat(target, max_tokens=24).choices[0].message.content
        words = full.split()
        assert len(words) >= 3, full
        stop = " " + words[2]
        assert stop in full
        answer = _chat(target, max_tokens=24, stop=[stop])
        text = answer.choices[0].message.content
        assert answer.choices[0].finish_reason == "stop"
        assert stop not in text
        assert full.startswith(text.rstrip())

    def test_max_tokens_ends_with_length(self, target: Target) -> None:
        answer = _chat(target, max_tokens=5)
        assert answer.choices[0].finish_reason == "length"
        assert answer.usage is not None and answer.usage.completion_tokens == 5

    def test_a_request_the_backend_refuses_is_the_clients_error(self, target: Target) -> None:
        with pytest.raises(openai.APIStatusError) as caught:
            _chat(target, **target.rejected)
        assert caught.value.status_code == target.rejected_status
        error = caught.value.body
        assert isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]
        assert isinstance(error.get("type"), str)
        assert _chat(target).choices[0].message.content  # and the replica still serves

    def test_a_backend_killed_mid_stream_ends_the_stream_with_an_error(self, target: Target) -> None:
        stream = _chat(target, stream=True, **target.cut_request)
        finish = None
        with pytest.raises(openai.APIError):
            for i, chunk in enumerate(stream):
                if i == 0:
                    target.cut()
                for choice in chunk.choices:
                    finish = choice.finish_reason or finish
        assert finish is None
        assert _chat(target).choices[0].message.content  # a new connection is served

    def test_load_aware_choice_avoids_the_busy_replica(self, target: Target) -> None:
        with target.make_busy() as weighed:
            before = target.served()
            for _ in range(4):
                wait_until(weighed, what="the gateway to weigh the busy replica's fresh load")
                _chat(target, model=f"{target.kind}-pair", max_tokens=2)
            after = target.served()
        assert after[0] - before[0] == 0 and after[1] - before[1] == 4
