"""The server's --kv-events-config and --export-tokenizer: parsed, refused when wrong, passed to the
engine; the exported tokenizer reloads with the ``tokenizers`` package alone and encodes as the engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tokenizers

from backends.engine import async_engine, llm_engine
from backends.engine.config import EngineConfig
from backends.engine.kv_events.config import KVEventsConfig
from backends.engine.tokenizer import Tokenizer
from backends.server import build_engine, parse_args
from tests.backends.engine.tiny import CHATML, EOS_ID, SPECIALS, byte_tokenizer

VLLM_EXAMPLE = (
    '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
    '"replay_endpoint": "tcp://*:5558", "topic": "kv"}'
)


def test_the_kv_events_flag_takes_vllms_json() -> None:
    args = parse_args(["--kv-events-config", VLLM_EXAMPLE])
    assert args.kv_events_config == KVEventsConfig(True, "zmq", "tcp://*:5557", "tcp://*:5558", topic="kv")
    assert parse_args([]).kv_events_config is None and parse_args([]).export_tokenizer is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--kv-events-config", '{"enable_kv_cache_events": true, "publisher": "kafka"}'],
        ["--kv-events-config", "not json"],
        ["--kv-events-config", VLLM_EXAMPLE, "--model", "a", "--model", "b"],
        ["--export-tokenizer", "/tmp/x", "--model", "a", "--model", "b"],
    ],
)
def test_bad_flags_stop_the_server_with_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err


def _tokenizer() -> Tokenizer:
    return Tokenizer(byte_tokenizer(), eos_token_id=EOS_ID, chat_template=CHATML, add_bos_token=False)


def test_the_flags_reach_the_engine_and_the_tokenizer_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    configs: list[EngineConfig] = []

    class FakeEngine:
        model_name, max_model_len, tokenizer = "m", 128, _tokenizer()

        def __init__(self, config: EngineConfig, **kwargs: Any) -> None:
            configs.append(config)

    monkeypatch.setattr(llm_engine, "LLMEngine", FakeEngine)
    monkeypatch.setattr(async_engine, "AsyncLLMEngine", lambda engine, **kwargs: engine)
    out = tmp_path / "tok"
    args = parse_args(["--kv-events-config", VLLM_EXAMPLE, "--export-tokenizer", str(out)])
    build_engine(args, "m")
    assert configs[0].kv_events == args.kv_events_config
    assert (out / "tokenizer.json").exists()
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert cfg == {
        "bos_token": None,
        "eos_token": SPECIALS[0],
        "add_bos_token": False,
        "chat_template": CHATML,
    }


def test_the_exported_tokenizer_encodes_as_the_engine(tmp_path: Path) -> None:
    tok = _tokenizer()
    tok.save(tmp_path)
    text = "Hello, wörld! <|im_start|>user\nhi<|im_end|>"
    plain = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))  # what a router has
    assert plain.encode(text, add_special_tokens=False).ids == tok.encode(text, add_special_tokens=True)
    again = Tokenizer.from_hf_dir(tmp_path)
    assert again.encode(text, add_special_tokens=True) == tok.encode(text, add_special_tokens=True)
    assert again.chat_template == CHATML and again.eos_token_id == EOS_ID and again.bos_token_id is None
    messages = [{"role": "user", "content": "hi"}]
    assert again.apply_chat_template(messages) == tok.apply_chat_template(messages)
