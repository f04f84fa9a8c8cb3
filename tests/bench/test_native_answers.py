"""The overhead bench's canned native answers (``bench/harness/native.py``) read, through each kind's
adapter, as the canned OpenAI answer: the same text and usage, so a kind's bench row measures only
the adapter's translation."""

from __future__ import annotations

import msgspec
import pytest
from harness.native import KINDS, native_answers
from harness.nginx import JSON_BODY, SSE_BODY, kind_locations

from gateway.adapters import build_adapter
from gateway.sse import SSERelay

BODY = {"model": "canned", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32}


def _openai() -> tuple[str, list[str]]:
    plain = msgspec.json.decode(JSON_BODY.read_bytes())
    return plain["choices"][0]["message"]["content"], [
        plain["usage"]["prompt_tokens"],
        plain["usage"]["completion_tokens"],
    ]


def _streamed_text(relayed: bytes) -> str:
    texts = []
    for event in relayed.split(b"\n\n"):
        payload = event.removeprefix(b"data: ")
        if not event.startswith(b"data: ") or payload == b"[DONE]":
            continue
        for choice in msgspec.json.decode(payload)["choices"]:
            texts.append(choice["delta"].get("content") or "")
    return "".join(texts)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kinds_canned_answer_translates_to_the_openai_one(kind: str) -> None:
    (_, plain), (_, stream) = native_answers(kind, JSON_BODY, SSE_BODY)
    text, usage = _openai()
    adapter = build_adapter(kind)  # type: ignore[arg-type]
    exchange = adapter.exchange("/chat/completions", dict(BODY), "http://bench", stream=False)
    body = plain.encode() if exchange is None else exchange.translator.body(plain.encode())
    answer = msgspec.json.decode(body)
    assert answer["choices"][0]["message"]["content"] == text
    assert [answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]] == usage

    exchange = adapter.exchange("/chat/completions", dict(BODY, stream=True), "http://bench", stream=True)
    if exchange is None:
        events = stream.encode()
    else:
        translator = exchange.translator.stream()
        events = translator.feed(stream.encode()) + translator.end()
    relay = SSERelay((), drop_usage_chunk=False)
    relayed = relay.feed(events)
    assert relay.is_done and relay.usage is not None and relay.finish_reasons == ["stop"]
    assert _streamed_text(relayed) == _streamed_text(SSE_BODY.read_bytes())


def test_nginx_has_a_location_per_kind_and_answer() -> None:
    locations = kind_locations()
    for kind in KINDS:
        assert f"location ^~ /kinds/{kind}/json/ {{" in locations
        assert f"location ^~ /kinds/{kind}/sse/ {{" in locations
