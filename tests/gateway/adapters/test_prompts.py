"""Chat messages as one prompt for text-only native APIs, in each family's format."""

from __future__ import annotations

import pytest

from gateway.adapters.prompts import render_chat
from gateway.errors import InvalidRequest

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {}}]},
]


def test_chatml_opens_the_assistants_turn() -> None:
    assert render_chat(MESSAGES, "chatml") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_llama3_mistral_and_plain() -> None:
    llama3 = render_chat(MESSAGES, "llama3")
    assert llama3.startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
    )
    assert llama3.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert render_chat(MESSAGES, "mistral") == "<s>[INST] Be brief.\n\nHi [/INST]"
    assert render_chat(MESSAGES, "plain") == "system: Be brief.\nuser: Hi\nassistant:"


@pytest.mark.parametrize("messages", [[], "hi", [{"role": "user", "content": 3}], [7]])
def test_malformed_messages_are_the_clients_error(messages: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        render_chat(messages, "chatml")
    assert caught.value.param is not None and caught.value.param.startswith("messages")
