"""Where the text is: prompt slots of each request shape, answer slots, rewritten in place."""

from __future__ import annotations

from typing import Any

from gateway.guardrails.texts import answer_slots, request_slots


def test_chat_strings_and_parts() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]},
            {"role": "assistant", "tool_calls": []},
        ]
    }
    slots = request_slots("chat", body)
    assert [(s.param, s.text) for s in slots] == [
        ("messages[0].content", "be nice"),
        ("messages[1].content[0].text", "hi"),
    ]
    slots[1].set("HI")
    assert body["messages"][1]["content"][0]["text"] == "HI"  # type: ignore[index]


def test_completions_and_responses() -> None:
    assert [s.param for s in request_slots("completions", {"prompt": ["a", "b"]})] == [
        "prompt[0]",
        "prompt[1]",
    ]
    body = {
        "instructions": "rules",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "q"}]}, {"type": "x"}],
    }
    assert [s.param for s in request_slots("responses", body)] == ["instructions", "input[0].content[0].text"]
    assert [s.param for s in request_slots("responses", {"input": "q"})] == ["input"]


def test_answers() -> None:
    chat = {"choices": [{"message": {"content": "a"}}, {"delta": {"content": "b"}}]}
    assert [s.text for s in answer_slots("chat", chat)] == ["a", "b"]
    assert [s.text for s in answer_slots("completions", {"choices": [{"text": "c"}]})] == ["c"]
    responses = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "d"}]}]}
    assert [s.param for s in answer_slots("responses", responses)] == ["output[0].content[0].text"]
    assert answer_slots("chat", ["not", "a", "dict"]) == []


def test_chat_answers_read_refusals_and_reasoning() -> None:
    message = {"content": None, "refusal": "no", "reasoning_content": "think", "reasoning": "why"}
    slots = answer_slots("chat", {"choices": [{"message": message}, {"delta": {"refusal": "nope"}}]})
    assert [(s.param, s.field) for s in slots] == [
        ("choices[0].message.refusal", "refusal"),
        ("choices[0].message.reasoning_content", "reasoning_content"),
        ("choices[0].message.reasoning", "reasoning"),
        ("choices[1].delta.refusal", "refusal"),
    ]


def test_responses_answers_read_refusal_parts_and_summaries() -> None:
    refusal = {"type": "message", "content": [{"type": "refusal", "refusal": "no"}]}
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}]}
    slots = answer_slots("responses", {"output": [refusal, reasoning]})
    assert [(s.param, s.text) for s in slots] == [
        ("output[0].content[0].refusal", "no"),
        ("output[1].summary[0].text", "thought"),
    ]


def test_a_rewritten_answer_drops_its_logprobs() -> None:
    token = {"token": "a@b.io", "logprob": -0.1, "bytes": [97], "top_logprobs": []}
    chat: dict[str, Any] = {"choices": [{"message": {"content": "a@b.io"}, "logprobs": {"content": [token]}}]}
    [slot] = answer_slots("chat", chat)
    slot.set("a@b.io")  # unchanged: the tokens spell what the client sees anyway
    assert chat["choices"][0]["logprobs"] == {"content": [token]}
    slot.set("[REDACTED:EMAIL]")
    assert chat["choices"][0]["logprobs"] is None
    completion: dict[str, Any] = {"choices": [{"text": "a@b.io", "logprobs": {"tokens": ["a@b.io"]}}]}
    answer_slots("completions", completion)[0].set("[REDACTED:EMAIL]")
    assert completion["choices"][0]["logprobs"] is None
    part = {"type": "output_text", "text": "a@b.io", "logprobs": [token]}
    answer_slots("responses", {"output": [{"type": "message", "content": [part]}]})[0].set("x")
    assert part["logprobs"] == []


def test_a_function_call_output_is_checked() -> None:
    body = {
        "input": [
            {"type": "function_call_output", "call_id": "c", "output": "mail bob@corp.example.com"},
            {"type": "function_call_output", "call_id": "d", "output": [{"type": "input_text", "text": "t"}]},
        ]
    }
    assert [(s.param, s.text) for s in request_slots("responses", body)] == [
        ("input[0].output", "mail bob@corp.example.com"),
        ("input[1].output[0].text", "t"),
    ]
