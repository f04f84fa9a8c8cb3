"""The adapter seam: ``TranslatedResponse`` reads a native answer as the OpenAI one, each replica gets its
kind's adapter and pages, and ``server_root`` finds where a server's own routes live."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.adapters import Adapter, Exchange, TranslatedResponse, build_adapter
from gateway.adapters.shapes import DONE, Lines, OpenAIAnswer, error_body, sse_data
from gateway.replicas.balancer import Balancer, server_root
from gateway.replicas.config import HealthConfig, PoolRouting, RoutingConfig
from gateway.replicas.pools import Pool, Replica


class _Native:
    def __init__(self, status: int, chunks: list[bytes]) -> None:
        self.status = status
        self.content_type = "application/x-native"
        self._chunks = chunks
        self.closed = self.released = False
        self.retry_after: str | None = None

    async def read(self) -> bytes:
        return b"".join(self._chunks)

    async def chunks(self, idle_s: float, *, first_s: float | None = None) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.released = True


class _Upper:
    """A toy translator: a native line of text is a token; ``END`` ends the stream."""

    def body(self, payload: bytes) -> bytes:
        return b'{"text":"' + payload.upper() + b'"}'

    def error(self, status: int, payload: bytes) -> bytes:
        return error_body(status, payload.decode())

    def stream(self) -> _UpperStream:
        return _UpperStream()


class _UpperStream:
    def __init__(self) -> None:
        self.lines = Lines()
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        out = b""
        for line in self.lines.feed(chunk):
            if line == b"END":
                self.done = True
            else:
                out += b"data: " + line.upper() + b"\n\n"
        return out

    def end(self) -> bytes:
        return DONE if self.done else b""


async def _collect(response: TranslatedResponse) -> bytes:
    return b"".join([chunk async for chunk in response.chunks(1.0)])


async def test_a_translated_response_reads_bodies_errors_and_streams_as_openai() -> None:
    exchange = Exchange("http://h/native", b"{}", _Upper(), stream=False)
    plain = TranslatedResponse(_Native(200, [b"hi"]), exchange)
    assert plain.content_type == "application/json" and await plain.read() == b'{"text":"HI"}'
    failed = TranslatedResponse(_Native(422, [b"too long"]), exchange)
    assert failed.status == 422
    assert b'"invalid_request_error"' in await failed.read()

    streamed = Exchange("http://h/native", b"{}", _Upper(), stream=True)
    native = _Native(200, [b"a\nb", b"c\nEND\n"])
    response = TranslatedResponse(native, streamed)
    assert response.content_type == "text/event-stream"
    assert await _collect(response) == b"data: A\n\ndata: BC\n\n" + DONE
    response.release()
    assert native.released


async def test_a_native_stream_that_stops_without_its_end_stays_cut_off() -> None:
    response = TranslatedResponse(_Native(200, [b"a\n", b"b\n"]), Exchange("u", b"", _Upper(), stream=True))
    assert await _collect(response) == b"data: A\n\ndata: B\n\n"  # no [DONE]: the relay reports the cut


@pytest.mark.parametrize(
    ("base_url", "root"),
    [
        ("http://h:8000/v1", "http://h:8000"),
        ("http://h:8000/v1/", "http://h:8000"),
        ("https://gw.example/tgi/v1", "https://gw.example/tgi"),
        ("http://triton:8000", "http://triton:8000"),
        ("https://api.example/openai", "https://api.example/openai"),
    ],
)
def test_server_root_drops_only_the_v1(base_url: str, root: str) -> None:
    assert server_root(base_url) == root


def test_each_replica_gets_its_kinds_adapter_health_and_load_pages() -> None:
    pools = {
        "mixed": Pool(
            (
                Replica("http://a:8000/v1", "m"),
                Replica("http://b:8080/v1", "m", kind="tgi"),
                Replica("http://c:8000", "m", kind="triton", metrics_url="http://c:8002/metrics"),
                Replica("http://d:11434/v1", "m", kind="ollama"),
                Replica("http://e:8080/v1", "m", kind="llamacpp"),
            )
        )
    }

    class _Policy:
        def __init__(self, routing: RoutingConfig) -> None:
            self.pools, self.routing = pools, routing

    balancer = Balancer()
    balancer.update(_Policy(RoutingConfig()))
    states = balancer.replicas("mixed")
    assert [s.adapter.kind for s in states] == ["openai", "tgi", "triton", "ollama", "llamacpp"]
    pages = [(s.health_url, s.metrics_url) for s in states]
    for (health_url, metrics), state in zip(pages, states, strict=True):
        root = server_root(state.replica.base_url)
        assert health_url == root + state.adapter.health_path
        assert metrics == (state.replica.metrics_url or root + state.adapter.metrics_path)
    assert pages[2][1] == "http://c:8002/metrics"

    # a pool's own paths win over the kind's
    paths = HealthConfig(path="/ready", metrics_path="/stats")
    balancer.update(_Policy(RoutingConfig(pools={"mixed": PoolRouting(health=paths)})))
    assert states[1].health_url == "http://b:8080/ready" and states[1].metrics_url == "http://b:8080/stats"
    assert states[2].metrics_url == "http://c:8002/metrics"  # the replica's own URL still wins


def test_a_reload_that_changes_a_replicas_kind_changes_its_adapter() -> None:
    class _Policy:
        def __init__(self, kind: Any) -> None:
            self.pools = {"p": Pool((Replica("http://a:1/v1", "m", kind=kind),))}
            self.routing = RoutingConfig()

    balancer = Balancer()
    balancer.update(_Policy("openai"))
    state = balancer.replicas("p")[0]
    balancer.update(_Policy("vllm"))
    assert balancer.replicas("p")[0] is state and state.adapter.kind == "vllm"


def test_openai_mode_sends_the_request_as_it_is() -> None:
    for kind in ("openai", "vllm"):
        adapter: Adapter = build_adapter(kind)
        assert adapter.exchange("/chat/completions", {"model": "m"}, "http://h", stream=False) is None


def test_openai_answer_writes_bodies_and_chunks() -> None:
    answer = OpenAIAnswer("m", chat=True)
    first, second = answer.delta("Hel"), answer.delta("lo")
    assert b'"role":"assistant"' in first and b'"role"' not in second
    assert answer.delta("") == b""
    closing = answer.finish("length", 3, 2)
    assert closing.endswith(DONE) and b'"finish_reason":"length"' in closing
    assert b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}' in closing
    text = OpenAIAnswer("m", chat=False)
    assert b'"object":"text_completion"' in text.delta("x")
    assert b'"text":"hi"' in text.body("hi", "stop", 1, 1)
    assert sse_data(b"data: {}") == b"{}" and sse_data(b"event: x") is None
