"""Responses streams: a part's text carried over from one delta event to the next, its tail sent as one
more delta before the event that ends the part, the sequence numbers moved to make room."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.guardrails.config import BlockListCheck, GuardrailSet, PiiCheck, SecretsCheck
from gateway.guardrails.guard import GuardSet, Verdict
from gateway.guardrails.responses_stream import TypedCarry
from gateway.guardrails.stream import StreamGuard

GUARD = GuardSet(
    "strict",
    GuardrailSet(pii=PiiCheck(), secrets=SecretsCheck(), block_list=BlockListCheck(words=("launch codes",))),
    None,
)
WHERE = {"item_id": "msg_1", "output_index": 0, "content_index": 0}


class Typed:
    """A Responses stream's events, numbered in order unless ``numbered`` is False."""

    def __init__(self, numbered: bool = True) -> None:
        self.numbered = numbered
        self.num_sent = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        data: dict[str, Any] = {"type": kind, **fields}
        if self.numbered:
            data["sequence_number"] = self.num_sent
            self.num_sent += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def message(text: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [part]}


def typed_events(*deltas: str, numbered: bool = True, done: bool = True) -> list[bytes]:
    """A stream of one message whose text comes as ``deltas`` (cut off after them without ``done``)."""
    event = Typed(numbered)
    text = "".join(deltas)
    events = [
        event("response.created", response={"id": "resp_1", "status": "in_progress", "output": []}),
        event("response.output_item.added", output_index=0, item={**message(""), "content": []}),
        event("response.content_part.added", **WHERE, part={"type": "output_text", "text": ""}),
        *(event("response.output_text.delta", **WHERE, delta=d, logprobs=[]) for d in deltas),
    ]
    if not done:
        return events
    return [
        *events,
        event("response.output_text.done", **WHERE, text=text, logprobs=[]),
        event("response.content_part.done", **WHERE, part={"type": "output_text", "text": text}),
        event("response.output_item.done", output_index=0, item=message(text)),
        event(
            "response.completed", response={"id": "resp_1", "status": "completed", "output": [message(text)]}
        ),
    ]


async def _source(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


async def relay(events: list[bytes]) -> tuple[list[bytes], list[tuple[str, str]]]:
    counted: list[tuple[str, str]] = []

    def on_verdict(guard: GuardSet, verdict: Verdict) -> None:
        counted.extend(verdict.actions)

    stream = StreamGuard("responses", (GUARD,), on_verdict)
    return [chunk async for chunk in stream.relay(_source(events))], counted


def documents(chunks: list[bytes]) -> list[dict[str, Any]]:
    """Each event's JSON, after checking its ``event:`` line names its type."""
    found = []
    for event in b"".join(chunks).split(b"\n\n"):
        if not event:
            continue
        head, _, data = event.partition(b"data: ")
        document = json.loads(data) if data.startswith(b"{") else {"data": data.decode()}
        if head:
            assert head == f"event: {document['type']}\n".encode()
        found.append(document)
    return found


def deltas_of(found: list[dict[str, Any]], kind: str = "response.output_text.delta") -> str:
    return "".join(d["delta"] for d in found if d.get("type") == kind)


def done_text(found: list[dict[str, Any]]) -> str:
    [done] = [d for d in found if d.get("type") == "response.output_text.done"]
    text: str = done["text"]
    return text


def numbers(found: list[dict[str, Any]]) -> list[int]:
    return [d["sequence_number"] for d in found if "sequence_number" in d]


async def test_an_email_split_across_deltas_is_redacted_and_no_event_is_held() -> None:
    events = typed_events("write to john.d", "oe@exam", "ple.com now")
    chunks, counted = await relay(events)
    assert len(chunks) == len(events)  # one out for each in: nothing waits for a later event
    found = documents(chunks)
    assert deltas_of(found) == "write to [REDACTED:EMAIL] now" == done_text(found)
    assert b"john" not in b"".join(chunks) and ("email", "redact") in counted
    completed = found[-1]["response"]["output"][0]["content"][0]["text"]
    assert completed == "write to [REDACTED:EMAIL] now"
    assert numbers(found) == list(range(len(found)))  # one more event, every later number moved up
    kinds = [d["type"] for d in found]
    at = kinds.index("response.output_text.done")
    assert found[at - 1] == {
        "type": "response.output_text.delta",
        **WHERE,
        "delta": "[REDACTED:EMAIL] now",  # the words a two-word block-list phrase may need wait too
        "logprobs": [],
        "sequence_number": at - 1,
    }


async def test_a_card_in_groups_across_deltas() -> None:
    found = documents((await relay(typed_events("card 4111 1111 ", "1111 1111 ok")))[0])
    assert deltas_of(found) == "card [REDACTED:CARD] ok" == done_text(found)
    assert "4111" not in json.dumps(found)


@pytest.mark.parametrize(
    "text", ["write to john.doe@example.com now", "card 4111 1111 1111 1111 and +44 20 7946 0958 ok"]
)
async def test_every_split_gives_the_text_of_the_done_event(text: str) -> None:
    for cut in range(1, len(text)):
        found = documents((await relay(typed_events(text[:cut], text[cut:])))[0])
        assert "[REDACTED:" in deltas_of(found), cut
        assert deltas_of(found) == done_text(found), cut
        assert numbers(found) == list(range(len(found))), cut


async def test_a_blocked_phrase_split_across_deltas_ends_the_stream() -> None:
    text = "the launch codes are here"
    for cut in range(1, len(text)):
        chunks, counted = await relay(typed_events(text[:cut], text[cut:]))
        found = documents(chunks)
        assert found[-1] == {"data": "[DONE]"} and found[-2]["error"]["code"] == "guardrail_blocked", cut
        assert b"launch" not in b"".join(chunks), cut  # nothing of the phrase went out, nor the done text
        assert ("block_list", "block") in counted


async def test_events_without_sequence_numbers_get_none() -> None:
    chunks, _ = await relay(typed_events("mail john.d", "oe@example.com now", numbered=False))
    found = documents(chunks)
    assert deltas_of(found) == "mail [REDACTED:EMAIL] now" == done_text(found)
    assert numbers(found) == []


async def test_a_stream_cut_off_sends_the_tail_at_its_end_or_before_done() -> None:
    events = typed_events("key sk-abcdefghij", "klmnopqrstuvwxyz", done=False)
    found = documents((await relay(events))[0])
    assert deltas_of(found) == "key [REDACTED:OPENAI_KEY]"
    assert numbers(found) == list(range(len(found)))  # the last one made after the last sent
    found = documents((await relay([*events, b"data: [DONE]\n\n"]))[0])
    assert deltas_of(found) == "key [REDACTED:OPENAI_KEY]" and found[-1] == {"data": "[DONE]"}
    assert found[-2]["delta"].endswith("[REDACTED:OPENAI_KEY]") and numbers(found) == list(
        range(len(found) - 1)
    )


async def test_an_error_event_ends_the_part() -> None:
    event = Typed()
    events = [
        event("response.output_text.delta", **WHERE, delta="to a@b.io"),
        event("error", code="server_error", message="the engine failed", param=None),
    ]
    found = documents((await relay(events))[0])
    assert [d["type"] for d in found] == ["response.output_text.delta"] * 2 + ["error"]
    assert deltas_of(found) == "to [REDACTED:EMAIL]" and numbers(found) == [0, 1, 2]


async def test_parts_carry_apart_refusals_and_summaries_alike() -> None:
    event = Typed()
    second = {**WHERE, "content_index": 1}
    summary = {"item_id": "rs_1", "output_index": 1, "summary_index": 0}
    events = [
        event("response.output_text.delta", **WHERE, delta="mail jane.r"),
        event("response.refusal.delta", **second, delta="no, john.d"),
        event("response.reasoning_summary_text.delta", **summary, delta="thinks of ann.l"),
        event("response.output_text.delta", **WHERE, delta="oe@example.com now"),
        event("response.refusal.delta", **second, delta="oe@example.com ok"),
        event("response.reasoning_summary_text.delta", **summary, delta="ee@example.com here"),
        event("response.output_text.done", **WHERE, text="mail jane.roe@example.com now"),
        event("response.refusal.done", **second, refusal="no, john.doe@example.com ok"),
        event("response.reasoning_summary_part.done", **summary, part={"type": "summary_text"}),
    ]
    found = documents((await relay(events))[0])
    assert deltas_of(found) == "mail [REDACTED:EMAIL] now" == done_text(found)
    assert deltas_of(found, "response.refusal.delta") == "no, [REDACTED:EMAIL] ok"
    assert deltas_of(found, "response.reasoning_summary_text.delta") == "thinks of [REDACTED:EMAIL] here"
    assert numbers(found) == list(range(len(found)))
    kinds = [d["type"] for d in found]
    assert kinds[-2:] == ["response.reasoning_summary_text.delta", "response.reasoning_summary_part.done"]
    assert {k: found[-2][k] for k in summary} == summary and "logprobs" not in found[-2]


async def test_other_events_are_checked_whole() -> None:
    event = Typed()
    arguments = {"item_id": "fc_1", "output_index": 0}
    events = [
        event("response.function_call_arguments.delta", **arguments, delta='{"to": "a@b.io"}'),
        event("response.output_text.delta", **WHERE, delta="hi "),
        event("response.output_item.done", output_index=0, item={"id": "fc_1", "type": "function_call"}),
    ]
    found = documents((await relay(events))[0])
    assert found[0]["delta"] == '{"to": "[REDACTED:EMAIL]"}'
    kinds = [d["type"] for d in found]
    assert kinds[2:] == ["response.output_item.done", "response.output_text.delta"]  # another item's end
    assert found[-1]["delta"] == "hi " and numbers(found) == [0, 1, 2, 3]  # ours ends with the stream


def test_numbers_with_gaps_stay_increasing() -> None:
    carry = TypedCarry(lambda text: (text, 0), lambda text: text.upper())
    first: dict[str, Any] = {
        "type": "response.output_text.delta",
        **WHERE,
        "delta": "ab",
        "sequence_number": 4,
    }
    assert carry.event(first) == ([], True) and first["delta"] == ""
    done: dict[str, Any] = {"type": "response.output_text.done", **WHERE, "text": "ab", "sequence_number": 9}
    before, changed = carry.event(done)
    assert changed and before == [
        {"type": "response.output_text.delta", **WHERE, "delta": "AB", "sequence_number": 9}
    ]
    assert done["sequence_number"] == 10 and done["text"] == "AB"
    later: dict[str, Any] = {"type": "response.completed", "sequence_number": 12}
    assert carry.event(later) == ([], True) and later["sequence_number"] == 13
    assert carry.flush() == []


async def test_refusal_and_summary_texts_are_checked_in_every_event() -> None:
    event = Typed()
    raw = "no, john.doe@example.com"
    refusal_part = {"type": "refusal", "refusal": raw}
    summary = {"item_id": "rs_1", "output_index": 1, "summary_index": 0}
    items = [
        {"id": "msg_1", "type": "message", "content": [refusal_part]},
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": raw}]},
    ]
    events = [
        event("response.refusal.delta", **WHERE, delta=raw),
        event("response.refusal.done", **WHERE, refusal=raw),
        event("response.content_part.done", **WHERE, part=refusal_part),
        event("response.reasoning_summary_text.delta", **summary, delta=raw),
        event("response.reasoning_summary_text.done", **summary, text=raw),
        event("response.completed", response={"id": "resp_1", "status": "completed", "output": items}),
    ]
    found = documents((await relay(events))[0])
    assert "john" not in json.dumps(found)
    assert deltas_of(found, "response.refusal.delta") == "no, [REDACTED:EMAIL]"
    assert found[-1]["response"]["output"][0]["content"][0]["refusal"] == "no, [REDACTED:EMAIL]"


async def test_logprobs_are_emptied_in_every_event() -> None:
    token = {"token": "a@b.io", "logprob": -0.1, "bytes": [97], "top_logprobs": []}
    event = Typed()
    part = {"type": "output_text", "text": "to a@b.io", "logprobs": [token]}
    events = [
        event("response.output_text.delta", **WHERE, delta="to a@b.io", logprobs=[token]),
        event("response.output_text.done", **WHERE, text="to a@b.io", logprobs=[token]),
        event("response.content_part.done", **WHERE, part=part),
    ]
    found = documents((await relay(events))[0])
    assert "a@b.io" not in json.dumps(found)
    assert [d["logprobs"] for d in found if "logprobs" in d] == [[], [], []]
    assert found[-1]["part"]["logprobs"] == []


async def test_a_null_error_ends_no_part() -> None:
    event = Typed()
    events = [
        event("response.output_text.delta", **WHERE, delta="to a@b"),
        event("response.in_progress", error=None),
        event("response.output_text.delta", **WHERE, delta=".io now"),
        event("response.output_text.done", **WHERE, text="to a@b.io now"),
    ]
    found = documents((await relay(events))[0])
    assert deltas_of(found) == "to [REDACTED:EMAIL] now" == done_text(found)
