"""One validation contract, held by both servers: the gateway (gateway/schemas.py) and the reference
engine's server (backends/serving/protocol.py and params.py).

Each row of ``CONTRACT`` is a field, a value and whether OpenAI's API reference accepts it (``null``
where the reference says nullable, meaning the default). Every row runs through both servers:

- accepted: the engine server answers 200, and so does the gateway in front of it (so nothing the
  gateway lets through comes back as the engine's 400);
- refused: each answers 400 in OpenAI's shape, ``{"error": {"message", "type": "invalid_request_error",
  "param": <the field>, "code": <not null>}}``; the gateway's refusal is its own (never relayed).

A few rows are refused by the gateway only (``engine_accepts``): the engine serves one model, so it lets
``model`` be left out. ``CAPABILITIES`` lists values OpenAI (and so the gateway) accept that this engine
does not serve: the engine refuses them in the same shape, and the gateway relays that refusal as is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from backends.serving.app import create_app
from tests.backends.serving.harness import serve
from tools.servers.gateway_server import GatewayServer, write_policy

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
EMBED = "/v1/embeddings"
MODEL = "tiny"
EMBEDDING_MODEL = "minilm-fake"
NAMES = {CHAT: "chat", TEXT: "text", EMBED: "embed"}
MISSING = object()
"""A row value that leaves the field out of the body."""

BASE: dict[str, dict[str, Any]] = {
    CHAT: {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    TEXT: {"model": MODEL, "prompt": "Hi", "max_tokens": 2},
    EMBED: {"model": EMBEDDING_MODEL, "input": "Hi"},
}


@dataclass(frozen=True)
class Row:
    endpoint: str
    field: str
    value: Any
    accepted: bool
    extra: tuple[tuple[str, Any], ...] = ()
    """Other fields the value needs (``top_logprobs`` needs ``logprobs: true``)."""
    engine_accepts: bool = False
    """Refused by the gateway, accepted by the engine (which needs no model name: it serves one)."""

    def body(self) -> dict[str, Any]:
        body = dict(BASE[self.endpoint])
        if self.value is MISSING:
            body.pop(self.field, None)
        else:
            body[self.field] = self.value
        body.update(self.extra)
        return body

    @property
    def id(self) -> str:
        value = "missing" if self.value is MISSING else repr(self.value)
        return f"{NAMES[self.endpoint]}.{self.field}={value[:40]}" + ("+" if self.extra else "")


def rows(endpoints: tuple[str, ...], field: str, accepted: list[Any], refused: list[Any]) -> list[Row]:
    return [Row(e, field, v, True) for e in endpoints for v in accepted] + [
        Row(e, field, v, False) for e in endpoints for v in refused
    ]


SAMPLING = (CHAT, TEXT)
ALL = (CHAT, TEXT, EMBED)
WITH_LOGPROBS = (("logprobs", True),)
TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
MESSAGES_OK = [
    [{"role": "developer", "content": "Be brief"}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None},
        {"role": "tool", "content": "42", "tool_call_id": "t1"},
        {"role": "function", "name": "f", "content": "42"},
        {"role": "user", "content": "ok", "name": "ann"},
    ],
]
MESSAGES_REFUSED = [
    MISSING,
    None,
    [],
    "Hi",
    [1],
    [{"content": "Hi"}],
    [{"role": "wizard", "content": "Hi"}],
    [{"role": "user", "content": 5}],
    [{"role": "user", "content": [{"type": "text"}]}],
    [{"role": "user", "content": [{"type": "html", "text": "Hi"}]}],
]

CONTRACT: list[Row] = [
    *[Row(e, "model", BASE[e]["model"], True) for e in ALL],
    *rows(ALL, "model", [], ["", 5, "m" * 257]),
    *[Row(e, "model", v, False, engine_accepts=True) for e in ALL for v in (MISSING, None)],
    *rows((CHAT,), "messages", MESSAGES_OK, MESSAGES_REFUSED),
    *rows((TEXT,), "prompt", ["Hi", ["Hi"], [72, 105], [[72, 105]], "", None],
          [MISSING, [], 5, {"a": 1}, [72, "Hi"], [[]], [-1], [None]]),
    *rows((EMBED,), "input", ["Hi", ["a", "b"]], [MISSING, None, "", [], [""], 5, ["a", 1], ["x"] * 2049]),
    *rows((EMBED,), "encoding_format", ["float", "base64", MISSING], ["int8", None]),
    *rows((EMBED,), "dimensions", [None], [0, -1, "8"]),
    *rows(SAMPLING, "stream", [True, False, None], ["yes", 1]),
    *rows(SAMPLING, "stream_options", [None, {}, {"include_usage": True}, {"include_usage": False}],
          ["yes", {"include_usage": "yes"}, {"include_usage": None}]),
    *rows(SAMPLING, "n", [1, 2, None, 2.0], [0, 129, -1, 1.5, "2"]),  # 2.0 is the integer 2 in JSON
    *rows((CHAT,), "max_tokens", [1, None, 2.0], [0, -1, 1.5, "2"]),
    *rows((CHAT,), "max_completion_tokens", [1, None], [0, -1, "2"]),
    *rows((TEXT,), "max_tokens", [0, 1, None], [-1, 1.5, "2"]),
    *rows(SAMPLING, "temperature", [0, 0.7, 2, None], [-0.1, 2.1, "hot"]),
    *rows(SAMPLING, "top_p", [0, 0.5, 1, None], [-0.1, 1.1, "all"]),
    *rows(SAMPLING, "presence_penalty", [-2, 0.5, 2, None], [-2.1, 2.1, "x"]),
    *rows(SAMPLING, "frequency_penalty", [-2, 0.5, 2, None], [-2.1, 2.1, "x"]),
    *rows((CHAT,), "logprobs", [True, False, None], ["yes", 1]),
    *[Row(CHAT, "top_logprobs", v, True, WITH_LOGPROBS) for v in (0, 20, None)],
    *[Row(CHAT, "top_logprobs", v, False, WITH_LOGPROBS) for v in (-1, 21, "2")],
    Row(CHAT, "top_logprobs", 2, False),  # logprobs must be true for it
    Row(CHAT, "top_logprobs", None, True),
    *rows((TEXT,), "logprobs", [0, 5, 20, None], [-1, 21, True, "2"]),
    *rows(SAMPLING, "stop", ["\n", ["a", "b"], [], ["a", "b", "c", "d", "e"], None], ["", [""], 5, [1]]),
    *rows(SAMPLING, "seed", [0, -1, 2**63 - 1, -(2**63), None, 1e3], [2**63, 1.5, "1"]),
    *rows(ALL, "user", ["u-1", None], [5]),
    *rows((TEXT,), "echo", [False, None], ["yes"]),
    *rows((TEXT,), "best_of", [1, None], [-1, 21, "1"]),
    *rows((TEXT,), "suffix", ["", None], [5]),
    *rows((CHAT,), "tools", [[], None], ["x", [1]]),
    Row(CHAT, "tools", [TOOL], True, (("tool_choice", "none"),)),  # told not to call them: no-op
    *rows((CHAT,), "response_format", [{"type": "text"}, None], ["json", 5]),
    # structured outputs: served (tests/backends/serving/test_structured_outputs.py)
    *[Row(e, "response_format", {"type": "json_object"}, True) for e in SAMPLING],
    Row(CHAT, "response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}, True),
]  # fmt: skip

CAPABILITIES: list[Row] = [
    Row(TEXT, "echo", True, True),
    Row(TEXT, "suffix", "!", True),
    Row(TEXT, "best_of", 2, True),
    Row(TEXT, "prompt", ["a", "b"], True),  # a batch of prompts
    Row(TEXT, "prompt", [100_000], True),  # a token id past this model's vocabulary
    Row(CHAT, "messages", [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], True),
    Row(CHAT, "max_tokens", 100_000, True),  # past this model's context
    Row(EMBED, "input", [1, 2], True),  # token ids
    Row(EMBED, "dimensions", 8, True),
    # a tool choice without tools: the gateway passes it, the engine's tool calling refuses it
    Row(CHAT, "tool_choice", "auto", True),
    # audio: refused (unsupported_parameter), never silently dropped
    Row(CHAT, "modalities", ["text", "audio"], True),
    Row(CHAT, "audio", {"voice": "alloy", "format": "wav"}, True),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------- servers


class FakeEmbedder:
    """The embedding seam of the engine server: what is tested here is the server's validation."""

    model_name = EMBEDDING_MODEL

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        return [[1.0, 0.0, 0.0] for _ in texts], len(texts)


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # imported here: the table above is read by tests that must not pay for torch (tests/gateway)
    from backends.engine.async_engine import AsyncLLMEngine
    from backends.engine.config import EngineConfig
    from backends.engine.llm_engine import LLMEngine
    from tests.backends.engine.tiny import build_tiny_model

    model_dir = build_tiny_model(tmp_path_factory.mktemp("contract-tiny") / "llama", "gqa")
    config = EngineConfig(
        model=str(model_dir),
        device="cpu",
        kv_cache_bytes=8 << 20,
        num_threads=1,
        max_model_len=256,
        max_num_seqs=8,
    )
    engine = AsyncLLMEngine(LLMEngine(config))
    with serve(create_app(engine, embedder=FakeEmbedder(), served_model_name=MODEL)) as url:
        yield url


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory, engine_url: str) -> Iterator[str]:
    def pool(model: str) -> dict[str, Any]:
        return {"replicas": [{"base_url": f"{engine_url}/v1", "model": model}]}

    document = {
        "version": 1,
        "timeouts": {"connect_s": 2, "first_byte_s": 60, "idle_s": 60, "total_s": 120},
        "pools": {MODEL: pool(MODEL), EMBEDDING_MODEL: pool(EMBEDDING_MODEL)},
        "auth": {"required": False},
        "retry": {"max_attempts": 1},
        "store": {"url_env": None},
    }
    path = write_policy(tmp_path_factory.mktemp("contract") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:  # one client: a new one per request costs ~0.1 s
        yield client


def post(http: httpx.Client, base_url: str, row: Row) -> httpx.Response:
    return http.post(base_url + row.endpoint, json=row.body())


def assert_refusal(response: httpx.Response, param: str) -> dict[str, Any]:
    """A 400 in OpenAI's shape whose ``param`` names ``param`` (or a part of it)."""
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["type"] == "invalid_request_error" and error["message"], error
    assert isinstance(error["code"], str) and error["code"], error
    assert isinstance(error["param"], str), error
    assert error["param"] == param or error["param"].startswith((f"{param}.", f"{param}[")), error
    return dict(error)


# ------------------------------------------------------------------------------------------------ tests


def test_the_table_covers_every_validated_field() -> None:
    fields = {row.field for row in CONTRACT}
    validated = {"model", "messages", "prompt", "input", "stream", "stream_options", "n", "max_tokens",
                 "max_completion_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty",
                 "logprobs", "top_logprobs", "stop", "seed", "user", "encoding_format",
                 "dimensions"}  # fmt: skip
    assert validated <= fields
    for field in fields:  # both directions: each field has values accepted and values refused
        assert {row.accepted for row in CONTRACT if row.field == field} == {True, False}, field


@pytest.mark.parametrize("row", CONTRACT, ids=lambda row: row.id)
def test_engine_server_keeps_the_contract(http: httpx.Client, engine_url: str, row: Row) -> None:
    response = post(http, engine_url, row)
    if row.accepted or row.engine_accepts:
        assert response.status_code == 200, response.text[:300]
    else:
        assert_refusal(response, row.field)


@pytest.mark.parametrize("row", CONTRACT, ids=lambda row: row.id)
def test_gateway_keeps_the_contract(http: httpx.Client, gateway_url: str, row: Row) -> None:
    response = post(http, gateway_url, row)
    if row.accepted:  # through to the engine and back: the engine took what the gateway let through
        assert response.status_code == 200, response.text[:300]
        assert response.headers["x-sortyard-pool"]
    else:
        assert_refusal(response, row.field)
        assert "x-sortyard-pool" not in response.headers  # refused before routing: not the engine's 400


@pytest.mark.parametrize("row", CAPABILITIES, ids=lambda row: row.id)
def test_what_the_engine_does_not_serve_is_relayed_as_its_400(
    http: httpx.Client, engine_url: str, gateway_url: str, row: Row
) -> None:
    from_engine = assert_refusal(post(http, engine_url, row), row.field)
    through_gateway = post(http, gateway_url, row)
    assert through_gateway.headers["x-sortyard-pool"]  # the gateway accepted it and asked the engine
    assert assert_refusal(through_gateway, row.field) == from_engine
