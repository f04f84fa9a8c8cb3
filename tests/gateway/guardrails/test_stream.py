"""Streams: redaction within a delta and across a split one, no event held back, a block mid-stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.guardrails.config import BlockListCheck, GuardrailSet, PiiCheck, SecretsCheck
from gateway.guardrails.guard import GuardSet, Verdict
from gateway.guardrails.stream import MAX_CARRY_CHARS, StreamGuard
from tests.support.calls import chat_chunk

GUARD = GuardSet(
    "strict",
    GuardrailSet(pii=PiiCheck(), secrets=SecretsCheck(), block_list=BlockListCheck(words=("launch codes",))),
    None,
)


def sse(document: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(document).encode() + b"\n\n"


def chat_events(*deltas: str) -> list[bytes]:
    events = [sse(chat_chunk("m", "")), *(sse(chat_chunk("m", d)) for d in deltas)]
    return [
        *events,
        sse(chat_chunk("m", finish="stop")),
        sse(chat_chunk("m", usage=(3, 4))),
        b"data: [DONE]\n\n",
    ]


async def _source(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


async def relay(events: list[bytes], shape: str = "chat") -> tuple[list[bytes], list[tuple[str, str]]]:
    counted: list[tuple[str, str]] = []

    def on_verdict(guard: GuardSet, verdict: Verdict) -> None:
        counted.extend(verdict.actions)

    stream = StreamGuard(shape, (GUARD,), on_verdict)  # type: ignore[arg-type]
    return [chunk async for chunk in stream.relay(_source(events))], counted


def text_of(chunks: list[bytes]) -> str:
    text = []
    for event in b"".join(chunks).split(b"\n\n"):
        if event.startswith(b"data: {"):
            for choice in json.loads(event[6:]).get("choices", []):
                text.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
    return "".join(text)


async def test_redacts_within_a_delta() -> None:
    chunks, counted = await relay(chat_events("mail me at a@b.io ", "please."))
    assert text_of(chunks) == "mail me at [REDACTED:EMAIL] please."
    assert counted == [("email", "redact")]
    assert chunks[-1] == b"data: [DONE]\n\n"


async def test_an_email_split_across_deltas_is_redacted_and_no_event_is_held() -> None:
    events = chat_events("write to john.d", "oe@exam", "ple.com or call +44 20 ", "7946 0958 today")
    chunks, _ = await relay(events)
    assert len(chunks) == len(events)  # one out for each in: nothing waits for a later event
    text = text_of(chunks)
    assert text == "write to [REDACTED:EMAIL] or call [REDACTED:PHONE] today"
    assert "john" not in text and "7946" not in text


async def test_a_card_in_groups_across_deltas() -> None:
    chunks, _ = await relay(chat_events("card 4111 1111 ", "1111 1111 ok"))
    assert text_of(chunks) == "card [REDACTED:CARD] ok"


async def test_the_tail_comes_out_before_done_without_a_finish_event() -> None:
    events = [
        sse(chat_chunk("m", "key sk-abcdefghij")),
        sse(chat_chunk("m", "klmnopqrstuvwxyz")),
        b"data: [DONE]\n\n",
    ]
    chunks, _ = await relay(events)
    assert text_of(chunks) == "key [REDACTED:OPENAI_KEY]"
    assert chunks[-1].endswith(b"data: [DONE]\n\n")


async def test_the_carry_is_bounded() -> None:
    chunks, _ = await relay(chat_events("x" * (MAX_CARRY_CHARS + 50), "y"))
    first = json.loads(chunks[1][6:])["choices"][0]["delta"]["content"]
    assert len(first) == 50


async def test_a_block_ends_the_stream_with_an_error_event() -> None:
    events = chat_events("here are the launch ", "codes: 1234 ", "and more")
    chunks, counted = await relay(events)
    body = b"".join(chunks)
    assert body.endswith(b"data: [DONE]\n\n") and b"more" not in body and b"1234" not in body
    error = json.loads(body.split(b"\n\n")[-3][6:])["error"]
    assert error["code"] == "guardrail_blocked" and error["type"] == "invalid_request_error"
    assert counted == [("block_list", "block")]


async def test_completions_and_responses_streams() -> None:
    completion = [
        sse({"choices": [{"index": 0, "text": "to a@b", "finish_reason": None}]}),
        sse({"choices": [{"index": 0, "text": ".io", "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    ]
    chunks, _ = await relay(completion, "completions")
    assert text_of(chunks) == "to [REDACTED:EMAIL]"
    head = b"event: response.output_text.delta\ndata: "
    typed = head + b'{"type":"response.output_text.delta","delta":"a@b.io"}\n\n'
    chunks, _ = await relay([typed], "responses")  # carried over, then out at the end (test_responses_stream)
    assert chunks == [
        head + b'{"type":"response.output_text.delta","delta":""}\n\n',
        head + b'{"type":"response.output_text.delta","delta":"[REDACTED:EMAIL]"}\n\n',
    ]
    done = b'event: response.output_text.done\ndata: {"type":"response.output_text.done","text":"a@b.io"}\n\n'
    chunks, _ = await relay([done], "responses")
    assert b"[REDACTED:EMAIL]" in chunks[0] and b"a@b.io" not in chunks[0]  # a whole text: checked whole


async def test_events_split_across_reads_are_joined() -> None:
    whole = b"".join(chat_events("mail a@b.io now"))
    chunks, _ = await relay([whole[:17], whole[17:60], whole[60:]])
    assert text_of(chunks) == "mail [REDACTED:EMAIL] now"


@pytest.mark.parametrize(
    "text", ["write to john.doe@example.com now", "card 4111 1111 1111 1111 and +44 20 7946 0958 ok"]
)
async def test_every_split_gives_the_same_redaction(text: str) -> None:
    whole, _ = await relay(chat_events(text))
    expected = text_of(whole)
    assert "[REDACTED:" in expected
    for cut in range(1, len(text)):
        chunks, _ = await relay(chat_events(text[:cut], text[cut:]))
        assert text_of(chunks) == expected, cut


async def test_a_blocked_phrase_is_caught_however_it_is_split() -> None:
    text = "the launch codes are here"
    for cut in range(1, len(text)):
        for second in (cut + 1, len(text) - 1):
            if second <= cut or second >= len(text):
                continue
            chunks, _ = await relay(chat_events(text[:cut], text[cut:second], text[second:]))
            assert b"guardrail_blocked" in b"".join(chunks), (cut, second)
            assert "launch" not in text_of(chunks), (cut, second)  # nothing of the phrase went out


SECRETS = "my key sk-abcdefghijklmnopqrstuvwxyz123456 and mail john.doe@example.com end"
REDACTED = "my key [REDACTED:OPENAI_KEY] and mail [REDACTED:EMAIL] end"


def field_chunks(field: str, text: str, size: int = 5) -> list[bytes]:
    """``text`` as deltas of ``field`` (``refusal``, ``reasoning_content``, ...), ``size`` at a time."""
    return [
        sse({"choices": [{"index": 0, "delta": {field: text[i : i + size]}, "finish_reason": None}]})
        for i in range(0, len(text), size)
    ]


def fields_of(chunks: list[bytes]) -> dict[str, str]:
    joined: dict[str, str] = {}
    for event in b"".join(chunks).split(b"\n\n"):
        if event.startswith(b"data: {"):
            for choice in json.loads(event[6:]).get("choices", []):
                for field, value in (choice.get("delta") or {}).items():
                    joined[field] = joined.get(field, "") + (value or "")
    return joined


async def test_refusals_and_reasoning_are_checked_as_content_is() -> None:
    events = [
        *field_chunks("reasoning_content", SECRETS),
        *field_chunks("refusal", SECRETS),
        sse(chat_chunk("m", finish="stop")),
        b"data: [DONE]\n\n",
    ]
    chunks, _ = await relay(events)
    assert fields_of(chunks) == {"reasoning_content": REDACTED, "refusal": REDACTED}
    body = b"".join(chunks)
    assert b"john" not in body and b"sk-abc" not in body
    began = next(i for i, chunk in enumerate(chunks) if "refusal" in fields_of([chunk]))
    assert "reasoning_content" in fields_of(
        [chunks[began]]
    )  # the reasoning's tail goes as the refusal begins
    assert all("reasoning_content" not in fields_of([chunk]) for chunk in chunks[began + 1 :])
    chunks, _ = await relay([*field_chunks("reasoning", SECRETS), b"data: [DONE]\n\n"])
    assert fields_of(chunks) == {"reasoning": REDACTED}  # its tail made into an event before [DONE]


async def test_logprobs_go_from_every_chunk() -> None:
    def with_logprobs(event: bytes) -> bytes:
        document = json.loads(event[6:])
        for choice in document["choices"]:
            text = choice["delta"].get("content") or ""
            choice["logprobs"] = {"content": [{"token": text, "logprob": -0.5, "bytes": [1]}]}
        return sse(document)

    events = [with_logprobs(e) if e.startswith(b"data: {") else e for e in chat_events(SECRETS)]
    chunks, _ = await relay(events)
    assert text_of(chunks) == REDACTED
    body = b"".join(chunks)
    assert b"john" not in body and b'"logprob"' not in body
    completion = [
        sse(
            {
                "choices": [
                    {"index": 0, "text": SECRETS, "logprobs": {"tokens": [SECRETS]}, "finish_reason": None}
                ]
            }
        ),
        b"data: [DONE]\n\n",
    ]
    chunks, _ = await relay(completion, "completions")
    assert text_of(chunks) == REDACTED and b"john" not in b"".join(chunks)


async def test_a_null_error_does_not_skip_the_checks() -> None:
    events = [sse({**chat_chunk("m", "mail a@b.io now"), "error": None}), b"data: [DONE]\n\n"]
    chunks, _ = await relay(events)
    assert text_of(chunks) == "mail [REDACTED:EMAIL] now" and b"a@b.io" not in b"".join(chunks)
