"""Tokenizer wrapper and chat template rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.engine.chat_template import GEMMA3_CHAT_TEMPLATE, ChatTemplateError, render_chat_template
from backends.engine.tokenizer import Tokenizer
from tests.backends.engine.tiny import EOS_ID


@pytest.fixture
def tokenizer(tiny_dirs: dict[str, Path]) -> Tokenizer:
    return Tokenizer.from_hf_dir(tiny_dirs["gqa"])


def test_reads_special_tokens_and_template(tokenizer: Tokenizer) -> None:
    assert tokenizer.eos_token_id == EOS_ID
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.backend.token_to_id("<|im_start|>")
    assert tokenizer.decode(ids) == "user\nhi\nassistant\n"  # specials skipped


def test_template_features_like_transformers() -> None:
    template = (
        "{% for m in messages %}{% if m['role'] == 'bad' %}{{ raise_exception('no bad roles') }}{% endif %}"
        "{{ m['content'] | tojson }}\n{% endfor %}"
    )
    assert render_chat_template(template, [{"role": "user", "content": "é"}]) == '"é"\n'
    with pytest.raises(ChatTemplateError, match="no bad roles"):
        render_chat_template(template, [{"role": "bad", "content": "x"}])


def test_trim_and_lstrip_blocks() -> None:
    template = "{% for m in messages %}\n  {% if true %}\n{{ m['content'] }}\n  {% endif %}\n{% endfor %}"
    assert render_chat_template(template, [{"role": "u", "content": "a"}]) == "a\n"


def test_sandbox_blocks_attribute_escape() -> None:
    with pytest.raises(ChatTemplateError):
        render_chat_template("{{ messages.__class__.__mro__ }}", [])


def test_no_template_is_a_value_error(tokenizer: Tokenizer) -> None:
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}])


def test_gemma3_template_folds_the_system_prompt_and_names_the_model() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "  Hi  "},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]
    text = render_chat_template(GEMMA3_CHAT_TEMPLATE, messages, bos_token="<bos>")
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    )
    bare = render_chat_template(
        GEMMA3_CHAT_TEMPLATE, messages[1:2], add_generation_prompt=False, bos_token=""
    )
    assert bare == "<start_of_turn>user\nHi<end_of_turn>\n"
    with pytest.raises(ChatTemplateError, match="Conversation roles must alternate"):
        render_chat_template(GEMMA3_CHAT_TEMPLATE, [{"role": "assistant", "content": "x"}], bos_token="")
