"""Where the text is: prompt slots of each request shape, answer slots, rewritten in place."""

from __future__ import annotations

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
