"""What each upstream timeout bounds, what opens a breaker, what is retried, and what the metrics say.

- A plain response's headers come when generation ends (vLLM), so only ``total_s`` bounds them;
  ``first_byte_s`` bounds a stream's headers and first event, ``idle_s`` the gaps after it.
- A timeout of a request the replica accepted is no breaker failure; a connect timeout is one (a
  connect error, retried on another replica).
- A stream that breaks after its first event is a 200 in ``sortyard_requests_total`` and counts
  in ``sortyard_stream_errors_total`` and ``sortyard_upstream_errors_total``.

Every breaker here opens on one failure, so a failure wrongly counted shows at once.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.errors import UpstreamConnectError, UpstreamTimeout
from gateway.replicas.aiohttp_client import map_client_errors
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

MESSAGES: Any = [{"role": "user", "content": "hi"}]
CLIENT_TIMEOUT_S = 20.0
"""Far above every timeout under test: a timeout the gateway failed to apply shows as a client one."""


class Blackhole:
    """A loopback port whose accept queue is full: connecting to it hangs until the client gives up."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)  # never accepted: one queued connection fills it
        self.port = self.listener.getsockname()[1]
        self.fillers = []
        for _ in range(4):  # the kernel drops SYNs once the queue is full
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(filler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        for sock in (*self.fillers, self.listener):
            sock.close()


def _pool(*replicas: tuple[str, str], **timeouts: float) -> dict[str, Any]:
    """A pool of ``(base_url, served model)`` replicas, named r0, r1, ..."""
    pool: dict[str, Any] = {
        "replicas": [
            {"base_url": url, "model": model, "name": f"r{i}"} for i, (url, model) in enumerate(replicas)
        ]
    }
    if timeouts:
        pool["timeouts"] = {"connect_s": 1, "first_byte_s": 10, "idle_s": 10, "total_s": 10, **timeouts}
    return pool


def _policy(upstream: FakeUpstream, blackhole: Blackhole, *, on_timeout: bool = False) -> dict[str, Any]:
    url = upstream.base_url
    document = fake_policy(url)
    document["pools"].update(
        {
            # headers (plain) or first event (stream) after 0.5 s: past first_byte_s or idle_s, within total_s
            "late": _pool((url, "slow-start"), first_byte_s=0.1),
            "lateevent": _pool((url, "slow-start"), idle_s=0.1),
            "hangplain": _pool((url, "hang"), first_byte_s=0.1, total_s=0.4),
            "hangstream": _pool((url, "hang"), first_byte_s=0.2),
            # the first replica never answers: does the request go on to the second?
            "hangfirst": _pool((url, "hang"), (url, "echo"), first_byte_s=0.2),
            "hangfirstplain": _pool((url, "hang"), (url, "echo"), total_s=0.4),
            "nocontact": _pool((blackhole.base_url, "echo"), (url, "echo"), connect_s=0.2),
        }
    )
    document["retry"] = {"max_attempts": 3, "backoff_s": 0.001, "on_timeout": on_timeout}
    document["routing"] = {
        "balancer": {"strategy": "weighted"},  # equal weights: a fresh pool's first pick is r0
        "breaker": {"failure_threshold": 1, "open_s": 60},
        "health": {"probe_interval_s": 0},  # passive health only: every breaker change is a request's
    }
    return document


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream, blackhole: Blackhole
) -> Iterator[GatewayServer]:
    path = write_policy(tmp_path_factory.mktemp("faults") / "p.yaml", _policy(upstream, blackhole))
    server = GatewayServer(path).start()
    yield server
    server.stop()


def _client(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.url + "/v1", api_key="sk-x", max_retries=0, timeout=CLIENT_TIMEOUT_S
    )


def _breakers(gateway: GatewayServer, pool: str) -> dict[str, str]:
    return {label: state for p, label, state in gateway.gateway.balancer.breaker_states() if p == pool}


def _served(upstream: FakeUpstream, since: int, model: str) -> int:
    return sum(1 for body in upstream.requests[since:] if body.get("model") == model)


def _timeouts(gateway: GatewayServer, pool: str) -> float:
    """The pool's timed-out attempts as the gateway counted them. The fake upstream's own record is no
    proof of an attempt: on a busy machine the gateway can give up on a hanging replica before the
    fake has read (and recorded) the request's body."""
    return samples(gateway).get(f"sortyard_upstream_errors_total{{kind=upstream_timeout,pool={pool}}}", 0.0)


def _stream_text(gateway: GatewayServer, model: str) -> str:
    stream = _client(gateway).chat.completions.create(model=model, messages=MESSAGES, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def samples(gateway: GatewayServer) -> dict[str, float]:
    """``name{label=value,...}`` -> value, from the gateway's /metrics (after its after-response work)."""
    gateway.settle()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(gateway.url + "/metrics", timeout=5).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def test_a_plain_response_slower_than_first_byte_s_is_served_and_the_breaker_stays_closed(
    gateway: GatewayServer,
) -> None:
    for _ in range(2):  # one failure would open this breaker; the second request proves it did not
        answer = _client(gateway).chat.completions.create(model="late", messages=MESSAGES)
        assert answer.choices[0].message.content == "Hello from the fake upstream."
    assert _breakers(gateway, "late") == {"r0": "closed"}


def test_a_stream_slower_than_first_byte_s_is_a_504_that_leaves_the_breaker_closed(
    gateway: GatewayServer,
) -> None:
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as info:
            _stream_text(gateway, "late")
        assert info.value.status_code == 504 and info.value.code == "upstream_timeout"
    assert _breakers(gateway, "late") == {"r0": "closed"}


def test_a_streams_first_event_is_bounded_by_first_byte_s_not_idle_s(gateway: GatewayServer) -> None:
    assert _stream_text(gateway, "lateevent") == "Hello from the fake upstream."


def test_a_plain_request_times_out_at_total_s_without_opening_the_breaker(gateway: GatewayServer) -> None:
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as info:
            _client(gateway).chat.completions.create(model="hangplain", messages=MESSAGES)
        assert info.value.status_code == 504 and info.value.code == "upstream_timeout"
    assert _breakers(gateway, "hangplain") == {"r0": "closed"}
    with pytest.raises(openai.InternalServerError) as info:
        _stream_text(gateway, "hangstream")
    assert info.value.status_code == 504
    assert _breakers(gateway, "hangstream") == {"r0": "closed"}


def test_a_timed_out_attempt_is_not_retried_by_default(
    gateway: GatewayServer, upstream: FakeUpstream
) -> None:
    since, before = len(upstream.requests), _timeouts(gateway, "hangfirst")
    with pytest.raises(openai.InternalServerError) as info:
        _stream_text(gateway, "hangfirst")  # r0 hangs past first_byte_s
    assert info.value.status_code == 504
    assert _timeouts(gateway, "hangfirst") == before + 1 and _served(upstream, since, "echo") == 0


def test_on_timeout_retries_a_stream_but_a_plain_request_has_no_time_left(
    tmp_path: Path, upstream: FakeUpstream, blackhole: Blackhole
) -> None:
    path = write_policy(tmp_path / "p.yaml", _policy(upstream, blackhole, on_timeout=True))
    gateway = GatewayServer(path).start()
    try:
        since = len(upstream.requests)
        assert _stream_text(gateway, "hangfirst") == "Hello from the fake upstream."
        assert _timeouts(gateway, "hangfirst") == 1 and _served(upstream, since, "echo") == 1
        since = len(upstream.requests)
        with pytest.raises(openai.InternalServerError) as info:
            _client(gateway).chat.completions.create(model="hangfirstplain", messages=MESSAGES)
        assert info.value.status_code == 504  # it waited for r0 until the request's total_s
        assert _served(upstream, since, "echo") == 0
        assert (
            _breakers(gateway, "hangfirst")
            == _breakers(gateway, "hangfirstplain")
            == {
                "r0": "closed",
                "r1": "closed",
            }
        )
    finally:
        gateway.stop()


def test_a_connect_timeout_is_a_connect_error(gateway: GatewayServer, upstream: FakeUpstream) -> None:
    with pytest.raises(UpstreamConnectError), map_client_errors("upstream r0"):
        raise aiohttp.ConnectionTimeoutError("Connection timeout to host")
    with pytest.raises(UpstreamTimeout), map_client_errors("upstream r0"):
        raise TimeoutError
    since = len(upstream.requests)
    answer = _client(gateway).chat.completions.create(model="nocontact", messages=MESSAGES)  # r0 first
    assert answer.choices[0].message.content == "Hello from the fake upstream."
    assert _served(upstream, since, "echo") == 1  # retried on r1 although on_timeout is off
    assert _breakers(gateway, "nocontact") == {"r0": "open", "r1": "closed"}
    counts = samples(gateway)
    assert counts["sortyard_requests_total{endpoint=chat,pool=nocontact,status=200}"] == 1


def test_a_stream_broken_midway_counts_as_200_and_a_stream_error(gateway: GatewayServer) -> None:
    before = samples(gateway)
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "cut", "stream": True, "messages": MESSAGES},
        timeout=CLIENT_TIMEOUT_S,
    )
    assert response.status_code == 200
    events = [event for event in response.text.split("\n\n") if event]
    assert events[-1] == "data: [DONE]" and "upstream_protocol_error" in events[-2]
    after = samples(gateway)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta("sortyard_requests_total{endpoint=chat,pool=cut,status=200}") == 1
    assert delta("sortyard_requests_total{endpoint=chat,pool=cut,status=502}") == 0
    assert delta("sortyard_stream_errors_total{kind=upstream_protocol_error,pool=cut}") == 1
    assert delta("sortyard_upstream_errors_total{kind=upstream_protocol_error,pool=cut}") == 1


def test_a_failed_plain_request_counts_its_status_and_its_upstream_error(gateway: GatewayServer) -> None:
    before = samples(gateway)
    with pytest.raises(openai.InternalServerError):
        _client(gateway).chat.completions.create(model="fail", messages=MESSAGES)
    after = samples(gateway)
    for name in (
        "sortyard_requests_total{endpoint=chat,pool=fail,status=502}",
        "sortyard_upstream_errors_total{kind=upstream_error,pool=fail}",
    ):
        assert after.get(name, 0.0) - before.get(name, 0.0) == 1, name
    assert "sortyard_stream_errors_total{kind=upstream_error,pool=fail}" not in after
