"""Two replicas of a pool behind a real gateway: one killed under load, and long plain generations.

- Killed under load: every plain request succeeds (a failed attempt is retried on the other replica
  before the first byte), the streams the dead replica was serving end with an OpenAI-shaped error
  event and then ``data: [DONE]``, the others go on; its breaker opens; the metrics count each failed
  attempt and the broken streams as the 200s their clients saw.
- Long plain generations: a replica that sends a plain response's headers only when generation ends
  (as vLLM does), later than ``first_byte_s`` but within ``total_s``, answers every request, and its
  breaker stays closed.

Every wait is for a condition, under a deadline; no test sleeps for a guessed time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

pytestmark = pytest.mark.slow
MESSAGES: Any = [{"role": "user", "content": "hi"}]
DEADLINE_S = 15.0
"""How long a condition may take to come true on a loaded machine: far more than it ever needs."""


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _samples(gateway: GatewayServer) -> dict[str, float]:
    """``name{label=value,...}`` -> value, once the gateway's after-response work is done."""
    gateway.settle()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(gateway.url + "/metrics", timeout=5).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def _total(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that carry all of ``labels``."""
    wanted = [f"{k}={v}" for k, v in labels.items()]
    return sum(
        value
        for key, value in samples.items()
        if key.startswith(name + "{") and all(w in key[len(name) + 1 : -1].split(",") for w in wanted)
    )


def _served(upstream: FakeUpstream, model: str) -> int:
    return sum(1 for body in upstream.requests if body.get("model") == model)


class Stream:
    """One streamed chat request, read event by event in the background."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.events: list[str] = []
        self.status: int | None = None
        self.is_over = False
        self.task = asyncio.create_task(self._read(http, url))

    async def _read(self, http: httpx.AsyncClient, url: str) -> None:
        body = {"model": "streams", "stream": True, "messages": MESSAGES}
        async with http.stream("POST", url, json=body) as response:
            self.status = response.status_code
            buffer = ""
            async for text in response.aiter_text():
                buffer += text
                *complete, buffer = buffer.split("\n\n")
                self.events.extend(complete)
        self.is_over = True

    async def cancel(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def test_one_of_two_replicas_killed_under_load(tmp_path: Path) -> None:
    alive, victim = FakeUpstream().start(), FakeUpstream().start()
    document = fake_policy(alive.base_url)
    both = (alive, victim)
    document["pools"]["duo"] = {
        "replicas": [{"base_url": r.base_url, "model": "echo"} for r in both],
        # a dead replica refuses connects at once; the bounds only keep a loaded machine's stall from
        # failing attempts on the live one
        "timeouts": {"connect_s": 10, "first_byte_s": 10, "idle_s": 10, "total_s": 60},
    }
    document["pools"]["streams"] = {
        "replicas": [{"base_url": r.base_url, "model": "slow-stream"} for r in both],
        # an event every 50 ms for 10 s: only the kill may end a stream within the test
        "timeouts": {"connect_s": 1, "first_byte_s": 10, "idle_s": 10, "total_s": 60},
    }
    document["retry"] = {"max_attempts": 3, "backoff_s": 0.005}
    document["routing"] = {
        "breaker": {"failure_threshold": 3, "open_s": 60},
        "health": {"probe_interval_s": 0},  # passive health alone takes the victim out
    }
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", document)).start()
    victim_label = f"127.0.0.1:{victim.port}"
    url = gateway.url + "/v1/chat/completions"
    statuses: list[int] = []
    killed: list[FakeUpstream] = []

    def victim_state(pool: str) -> Any:
        (state,) = [s for s in gateway.gateway.balancer.replicas(pool) if s.label == victim_label]
        return state

    async def scenario() -> tuple[list[Stream], list[Stream]]:
        async with httpx.AsyncClient(timeout=30) as http:
            streams = [Stream(http, url) for _ in range(6)]
            await wait_for(lambda: all(s.events for s in streams), "every stream's first event")
            num_on_victim = _served(victim, "slow-stream")
            assert 0 < num_on_victim < len(streams)  # least_outstanding spread them over both
            stop = asyncio.Event()

            async def worker() -> None:
                while not stop.is_set():
                    response = await http.post(url, json={"model": "duo", "messages": MESSAGES})
                    statuses.append(response.status_code)

            workers = [asyncio.create_task(worker()) for _ in range(8)]
            await wait_for(lambda: _served(victim, "echo") >= 8, "load on the victim")
            seen = [len(s.events) for s in streams]
            await asyncio.to_thread(victim.stop)  # killed: its streams are cut, its connects refused
            killed.append(victim)
            await wait_for(
                lambda: sum(s.is_over for s in streams) == num_on_victim, "the victim's streams to end"
            )
            cut = [s for s in streams if s.is_over]
            going = [s for s in streams if not s.is_over]
            await wait_for(
                lambda: all(len(s.events) > n + 2 for s, n in zip(streams, seen, strict=True) if s in going),
                "the other streams to go on",
            )
            await wait_for(
                lambda: victim_state("duo").breaker.state == "open", "the victim's breaker to open"
            )
            done_when_open = len(statuses)
            await wait_for(lambda: len(statuses) >= done_when_open + 16, "requests after the breaker opened")
            stop.set()
            await asyncio.gather(*workers)
            for stream in going:
                await stream.cancel()  # the client leaves
            response = await http.post(url, json={"model": "duo", "messages": MESSAGES})
            statuses.append(response.status_code)  # an ordinary request after it all
            return cut, going

    try:
        cut, going = asyncio.run(scenario())
        assert statuses and set(statuses) == {200}
        for stream in cut:
            assert stream.status == 200
            *_, error_event, done = stream.events
            assert done == "data: [DONE]"
            error = json.loads(error_event.removeprefix("data: "))["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "server_error" and error["code"] == "upstream_protocol_error"
            assert all("error" not in event for event in stream.events[:-2])
        assert all(stream.status == 200 and "error" not in "".join(stream.events) for stream in going)

        samples = _samples(gateway)
        requests = "sortyard_requests_total"
        assert _total(samples, requests, pool="duo", status="200") == len(statuses)
        assert _total(samples, requests, pool="duo") == len(statuses)  # no other status
        # a stream the upstream cut was a 200 with an error event; one its client left is a 499
        assert _total(samples, requests, pool="streams", status="200") == len(cut)
        assert _total(samples, requests, pool="streams", status="499") == len(going)
        assert _total(samples, requests, pool="streams") == len(cut) + len(going)
        assert _total(samples, "sortyard_stream_errors_total", pool="streams") == len(cut)
        errors = "sortyard_upstream_errors_total"
        assert _total(samples, errors, pool="streams") == len(cut)
        # every failed attempt was retried, and each one counts (on the victim, and on the live
        # replica should a loaded machine stall one of its attempts too)
        assert victim_state("duo").num_failures >= 3
        num_failures = sum(s.num_failures for s in gateway.gateway.balancer.replicas("duo"))
        assert _total(samples, errors, pool="duo") == num_failures
    finally:
        gateway.stop()
        for replica in both:
            if replica not in killed:
                replica.stop()


def test_long_plain_generations_do_not_open_breakers(tmp_path: Path) -> None:
    replicas = [FakeUpstream().start() for _ in range(2)]
    document = fake_policy(replicas[0].base_url)
    document["pools"]["patient"] = {
        "replicas": [{"base_url": r.base_url, "model": "slow-start"} for r in replicas],
        # the headers of a plain answer come after slow_start_s (0.5 s): past first_byte_s, within total_s
        "timeouts": {"connect_s": 1, "first_byte_s": 0.1, "idle_s": 0.1, "total_s": 20},
    }
    document["retry"] = {"max_attempts": 3, "backoff_s": 0.005}
    document["routing"] = {
        "breaker": {"failure_threshold": 5, "open_s": 60},
        "health": {"probe_interval_s": 0},
    }
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", document)).start()

    async def ask(client: openai.AsyncOpenAI) -> str | None:
        answer = await client.chat.completions.create(model="patient", messages=MESSAGES)
        return answer.choices[0].message.content

    async def scenario() -> list[str | None]:
        async with openai.AsyncOpenAI(
            base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0, timeout=30
        ) as client:
            # five long requests per replica: each one a breaker failure would open both breakers
            answers = await asyncio.gather(*(ask(client) for _ in range(10)))
            return [*answers, await ask(client)]  # and an ordinary request after them

    try:
        answers = asyncio.run(scenario())
        assert answers == ["Hello from the fake upstream."] * 11
        assert all(len(r.requests) >= 5 for r in replicas)  # each replica had its long requests
        breakers = gateway.gateway.balancer.breaker_states()
        states = {state for pool, _label, state in breakers if pool == "patient"}
        assert states == {"closed"}
        samples = _samples(gateway)
        assert _total(samples, "sortyard_requests_total", pool="patient", status="200") == 11
        assert _total(samples, "sortyard_upstream_errors_total", pool="patient") == 0
    finally:
        gateway.stop()
        for replica in replicas:
            replica.stop()
