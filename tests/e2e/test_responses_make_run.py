"""The README's Responses API tour against `make run`'s command: the real engine (a `kind: sortyard`
replica: chat completions only) behind the gateway, which serves the Responses API over its chat
completions. ``responses.create``, its stream (and the SDK's stream helper), and a two-turn
``previous_response_id`` conversation, with the official openai SDK."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.e2e.local_stack import local_stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with local_stack(tmp_path_factory.mktemp("responses-run")) as stack:
        yield openai.OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0, timeout=120)


def test_responses_create_answers_from_the_engine(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="gpt-4o-mini", input="What is the capital of France?", temperature=0, max_output_tokens=16
    )
    assert response.model == "gpt-4o-mini" and response.id.startswith("resp_")
    assert "Paris" in response.output_text
    assert response.usage is not None and response.usage.input_tokens > 0 and response.usage.output_tokens > 0


def test_its_stream_is_the_same_answer(client: openai.OpenAI) -> None:
    question = "What is the capital of France?"
    plain = client.responses.create(model="small", input=question, temperature=0, max_output_tokens=16)
    deltas: list[str] = []
    with client.responses.stream(
        model="small", input=question, temperature=0, max_output_tokens=16
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == plain.output_text
    assert final.usage is not None and plain.usage is not None
    assert final.usage.output_tokens == plain.usage.output_tokens


def test_a_two_turn_conversation_continues_with_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="small", input="What is the capital of France?", temperature=0, max_output_tokens=16
    )
    second = client.responses.create(
        model="small",
        input="And what country is that city in?",
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=24,
    )
    assert second.output_text and second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn was sent again
    items = client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in items.data] == ["message", "message", "message"]
    assert client.responses.retrieve(first.id).output_text == first.output_text
