"""The gateway's token ids match what the engine prefills: chat template rendered, then encoded without
special tokens; a text prompt with BOS when the model asks; token ids as given; long prompts cut safely."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.kv_routing.tokenizer import PromptTokenizer, TokenizerCache
from tests.support.tiny_tokenizer import VOCAB, WORDS, tokenizer_dir


def ids(*words: str) -> list[int]:
    return [VOCAB.get(w, VOCAB["[UNK]"]) for w in words]


def test_a_chat_request_is_rendered_with_its_template_then_encoded(tmp_path: Path) -> None:
    tokenizer = PromptTokenizer.from_dir(tokenizer_dir(tmp_path))
    body = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    assert tokenizer.prompt_ids(body) == ids(
        "<s>", "<|im_start|>", "system", "be", "brief", "<|im_end|>",
        "<|im_start|>", "user", "hi", "<|im_end|>", "<|im_start|>", "assistant",
    )  # fmt: skip
    with_tools = tokenizer.prompt_ids({**body, "tools": [{"type": "function"}]})
    assert with_tools is not None and "[UNK]" in [WORDS[i] for i in with_tools]  # "1", the template's


def test_a_text_prompt_gets_bos_when_the_model_asks_and_token_ids_pass_as_given(tmp_path: Path) -> None:
    plain = PromptTokenizer.from_dir(tokenizer_dir(tmp_path))
    assert plain.prompt_ids({"prompt": "hi be"}) == ids("hi", "be")
    with_bos = PromptTokenizer.from_dir(tokenizer_dir(tmp_path, add_bos_token=True))
    assert with_bos.prompt_ids({"prompt": "hi be"}) == ids("<s>", "hi", "be")
    assert plain.prompt_ids({"prompt": [5, 6, 7]}, max_tokens=2) == [5, 6]


def test_what_cannot_be_tokenized_like_the_engine_is_none(tmp_path: Path) -> None:
    tokenizer = PromptTokenizer.from_dir(tokenizer_dir(tmp_path, chat_template="{{ raise_exception('no') }}"))
    assert tokenizer.prompt_ids({"messages": [{"role": "user", "content": "hi"}]}) is None
    assert tokenizer.prompt_ids({"input": "hi"}) is None  # a Responses request
    assert tokenizer.prompt_ids({"prompt": ["a", "b"]}) is None
    (tmp_path / "tokenizer_config.json").unlink()
    assert PromptTokenizer.from_dir(tmp_path).prompt_ids({"messages": []}) is None  # no template


def test_a_long_prompt_is_cut_but_its_head_is_exact(tmp_path: Path) -> None:
    tokenizer = PromptTokenizer.from_dir(tokenizer_dir(tmp_path))
    text = " ".join(["hi", "be", "brief", "user"] * 300)
    full = tokenizer.prompt_ids({"prompt": text}, max_tokens=10_000)
    head = tokenizer.prompt_ids({"prompt": text}, max_tokens=40)
    assert full is not None and len(full) == 1200
    assert head == full[:40]


async def test_the_cache_loads_each_directory_once_off_the_loop(tmp_path: Path) -> None:
    directory = str(tokenizer_dir(tmp_path))
    cache = TokenizerCache()
    assert cache.get(directory) is None  # loading
    loaded = await cache.load(directory)
    assert loaded is not None and cache.get(directory) is loaded


async def test_a_directory_that_cannot_load_stays_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = TokenizerCache()
    assert cache.get(str(tmp_path)) is None
    for _ in range(1000):  # the load runs in a thread: wait for its verdict
        if str(tmp_path) in cache._loaded:
            break
        await asyncio.sleep(0.01)
    assert cache.get(str(tmp_path)) is None and "cannot load the tokenizer" in caplog.text


async def test_a_long_prompt_encodes_off_the_loop_to_the_same_ids(tmp_path: Path) -> None:
    tokenizer = PromptTokenizer.from_dir(tokenizer_dir(tmp_path))
    long_text = {"prompt": " ".join(["hi", "be"] * 3000)}  # past the inline limit: a thread encodes it
    assert await tokenizer.prompt_ids_off_loop(long_text, 500) == tokenizer.prompt_ids(long_text, 500)
    short = {"messages": [{"role": "user", "content": "hi"}]}
    assert await tokenizer.prompt_ids_off_loop(short) == tokenizer.prompt_ids(short)
    assert await tokenizer.prompt_ids_off_loop({"prompt": [1, 2, 3]}, 2) == [1, 2]
