"""The Locust users: one traffic pattern each, all against ``POST /v1/chat/completions``.

| class | request name(s) | what it offers |
|---|---|---|
| ``ChatUser`` | ``chat`` | short questions, no streaming |
| ``StreamingUser`` | ``stream`` | SSE; records ``SSE/ttft`` (ms) and ``SSE/tokens_per_s`` (tok/s) |
| ``SharedPromptUser`` | ``shared-prompt`` | four long (1-2k token) system prompts, varying user turns |
| ``CacheHeavyUser`` | ``cached`` | temperature 0, five questions; records ``CACHE/hit``, ``CACHE/miss`` |
| ``AutoTierUser`` | ``auto`` | ``model: "auto"`` with easy to hard prompts; records ``ROUTE/<pool>`` |
| ``OverLimitUser`` | ``over-limit``, ``over-limit 429`` | a key with a tiny limit: its 429s are expected |

Every generated response also records ``TOKENS/output`` with the output tokens as its content size
(cache hits excluded: they cost no GPU time), which ``sortyard cost estimate --from-result`` reads.
Custom rows put a measured value in Locust's response-time columns: ``SSE/tokens_per_s`` holds
tokens per second there, the others milliseconds.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any, ClassVar

from locust import FastHttpUser, HttpUser, between, task
from locust.env import Environment
from locust.exception import StopUser

from loadtests import prompts
from loadtests.config import LoadTestConfig
from loadtests.sse import StreamMeter

CHAT_PATH = "/v1/chat/completions"
_user_ids = itertools.count()


def record(environment: Environment, request_type: str, name: str, value: float, length: int = 0) -> None:
    """A custom metric as a Locust request row (it shows in the CSV and HTML reports)."""
    environment.events.request.fire(
        request_type=request_type,
        name=name,
        response_time=value,
        response_length=length,
        exception=None,
        context={},
    )


def _error_message(body: bytes | str | None) -> str:
    try:
        error = json.loads(body or b"")["error"]
        return f"{error.get('code') or error.get('type')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return repr((body or b"")[:200])


class GatewayUser(FastHttpUser):
    """Shared parts: the key, a seeded random source, one checked non-streaming chat call."""

    abstract = True
    wait_time = between(0.5, 1.5)
    config: ClassVar[LoadTestConfig] = LoadTestConfig.from_env()
    network_timeout = config.timeout_s
    connection_timeout = 10.0

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.rng = random.Random(f"{type(self).__name__}-{next(_user_ids)}")

    def api_key(self) -> str:
        return self.config.key

    def chat(
        self, name: str, body: dict[str, Any], *, is_limit_expected: bool = False
    ) -> dict[str, str] | None:
        """POST a chat completion and check its shape; returns the response headers when it succeeded.

        With ``is_limit_expected``, a proper 429 (OpenAI-shaped, with Retry-After) is a success too,
        reported under ``<name> 429``.
        """
        body = {"max_tokens": self.config.max_tokens, **body}
        started_s = time.perf_counter()
        headers = {"Authorization": f"Bearer {self.api_key()}"}
        with self.client.post(CHAT_PATH, json=body, headers=headers, name=name, catch_response=True) as resp:
            if resp.status_code == 429 and is_limit_expected:
                resp.request_meta["name"] = f"{name} 429"
                if problem := _limit_problem(resp.headers or {}, resp.content):
                    resp.failure(problem)
                else:
                    resp.success()  # the limit doing its job
                return None
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code} {_error_message(resp.content)}")
                return None
            try:
                answer = resp.json()
                if not isinstance(answer["choices"][0]["message"], dict):
                    raise TypeError("message")
            except (ValueError, KeyError, IndexError, TypeError):
                resp.failure(f"not a chat completion: {resp.content[:200]!r}")
                return None
            headers_out = {k.lower(): v for k, v in (resp.headers or {}).items()}
            if headers_out.get("x-sortyard-cache") != "hit":  # a hit cost no GPU time
                usage = answer.get("usage") or {}
                elapsed_ms = (time.perf_counter() - started_s) * 1000
                num_tokens = int(usage.get("completion_tokens") or 0)
                record(self.environment, "TOKENS", "output", elapsed_ms, num_tokens)
            return headers_out


def _limit_problem(headers: Any, content: bytes | None) -> str | None:
    """Why a 429 is not the gateway's proper rate-limit answer, or None."""
    if not (headers.get("retry-after") or headers.get("Retry-After")):
        return "429 without Retry-After"
    message = _error_message(content)
    if not message.startswith("rate_limit_exceeded"):
        return f"429 with an unexpected body: {message}"
    return None


class ChatUser(GatewayUser):
    """Short chats without streaming."""

    weight = 2

    @task
    def ask(self) -> None:
        self.chat("chat", {"model": self.config.model, "messages": prompts.chat_messages(self.rng)})


class SharedPromptUser(GatewayUser):
    """Long system prompts shared by many requests (prefix-cache and affinity traffic)."""

    @task
    def ask(self) -> None:
        self.chat(
            "shared-prompt",
            {"model": self.config.model, "messages": prompts.shared_prompt_messages(self.rng)},
        )


class CacheHeavyUser(GatewayUser):
    """The same few deterministic requests over and over: the response cache should answer most."""

    @task
    def ask(self) -> None:
        body = {
            "model": self.config.model,
            "temperature": 0,
            "messages": prompts.cacheable_messages(self.rng),
        }
        started_s = time.perf_counter()
        headers = self.chat("cached", body)
        if headers is not None and "x-sortyard-cache" in headers:
            elapsed_ms = (time.perf_counter() - started_s) * 1000
            record(self.environment, "CACHE", headers["x-sortyard-cache"], elapsed_ms)


class AutoTierUser(GatewayUser):
    """``model: "auto"``: the gateway's classifier picks small, medium or large per prompt."""

    @task
    def ask(self) -> None:
        _tier, messages = prompts.tiered_messages(self.rng)
        started_s = time.perf_counter()
        headers = self.chat("auto", {"model": self.config.auto_model, "messages": messages})
        if headers is not None and "x-sortyard-pool" in headers:
            elapsed_ms = (time.perf_counter() - started_s) * 1000
            record(self.environment, "ROUTE", headers["x-sortyard-pool"], elapsed_ms)


class OverLimitUser(GatewayUser):
    """A key with a tiny limit: 429s with an OpenAI-shaped body and Retry-After are the expected answer."""

    wait_time = between(1.0, 2.0)

    def on_start(self) -> None:
        if not self.config.limited_key:
            raise StopUser()

    def api_key(self) -> str:
        return self.config.limited_key or ""

    @task
    def ask(self) -> None:
        body = {"model": self.config.model, "messages": prompts.chat_messages(self.rng)}
        self.chat("over-limit", body, is_limit_expected=True)


class StreamingUser(HttpUser):
    """SSE streams, measured as they arrive (requests' line iterator yields each event on arrival)."""

    weight = 2
    wait_time = between(0.5, 1.5)
    config: ClassVar[LoadTestConfig] = LoadTestConfig.from_env()

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.rng = random.Random(f"{type(self).__name__}-{next(_user_ids)}")

    @task
    def stream(self) -> None:
        body = {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": prompts.chat_messages(self.rng),
        }
        headers = {"Authorization": f"Bearer {self.config.key}", "Accept": "text/event-stream"}
        meter = StreamMeter(started_s=time.perf_counter())
        with self.client.post(
            CHAT_PATH,
            json=body,
            headers=headers,
            name="stream",
            stream=True,
            catch_response=True,
            timeout=(10.0, self.config.timeout_s),
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code} {_error_message(resp.content)}")
                return
            try:
                for line in resp.iter_lines(chunk_size=None):
                    meter.feed(line, time.perf_counter())
            except OSError as e:  # requests' connection errors are OSErrors
                resp.failure(f"stream broke: {e}")
                return
            elapsed_ms = (time.perf_counter() - meter.started_s) * 1000
            resp.request_meta["response_time"] = elapsed_ms  # the whole stream, not just its headers
            problem = meter.problem()
            if problem is not None:
                resp.failure(problem)
                return
        if meter.ttft_ms is not None:
            record(self.environment, "SSE", "ttft", meter.ttft_ms)
        if meter.tokens_per_s is not None:
            record(self.environment, "SSE", "tokens_per_s", meter.tokens_per_s)
        if resp.headers.get("x-sortyard-cache") != "hit":
            record(self.environment, "TOKENS", "output", elapsed_ms, meter.num_output_tokens)
