"""The guardrails stage: prompts redacted before the upstream (or refused, 400), answers redacted plain
and streamed, actions counted; through the whole gateway, the access log never holds a redacted value."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import openai
import pytest

from gateway.errors import InvalidRequest, render
from gateway.guardrails.guard import Guardrails
from gateway.lifecycle import Observer
from gateway.pipeline import BytesResult, Call, Endpoint, Pipeline
from gateway.replicas.http1 import Http1UpstreamClient
from gateway.replicas.memory_client import MemoryUpstreamClient, Reply
from gateway.stages.guardrails import GuardrailsStage
from gateway.telemetry.access_log import AccessLog
from gateway.telemetry.tracing import GatewayTracer
from tests.gateway.guardrails.conftest import running_guard_service
from tests.support.calls import (
    api_key,
    build_call,
    chat_chunk,
    chat_completion,
    compile_doc,
    policy_doc,
    read_result,
    served_model,
    upstream_stage,
)
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

SERVED = served_model("small")
EMAIL = "jane.roe@example.com"
GUARDRAILS = {
    "pii": {"pii": {}},
    "no_secrets": {"secrets": {"action": "block"}},
    "quiet": {"block_list": {"words": ["write to"], "stages": ["output"]}},
}


class Setup:
    """The stage before an in-memory upstream that records what it was sent and answers ``answer``."""

    def __init__(self, *, pool: tuple[str, ...] = ("pii",), keys: list[dict[str, Any]] | None = None) -> None:
        document = policy_doc(guardrails=GUARDRAILS, keys=keys or [])
        document["pools"]["small"]["guardrails"] = list(pool)
        self.compiled = compile_doc(document)
        self.sent: list[dict[str, Any]] = []
        self.answer = f"Sure, I will write to {EMAIL}."
        self.counted: list[tuple[str, str, str, str]] = []
        stage = GuardrailsStage(Guardrails(), on_action=lambda *labels: self.counted.append(labels))
        self.client = MemoryUpstreamClient(self._answer)
        self.pipeline = Pipeline([stage, upstream_stage(self.compiled, self.client)])

    def _answer(self, url: str, body: bytes, headers: object) -> Reply:
        sent = msgspec.json.decode(body)
        self.sent.append(sent)
        if sent.get("stream"):
            head, tail = self.answer[:30], self.answer[30:]
            return Reply.sse(
                chat_chunk(SERVED, head), chat_chunk(SERVED, tail), chat_chunk(SERVED, finish="stop")
            )
        answer = chat_completion(SERVED, self.answer)
        if sent.get("logprobs"):  # one token a word: the email is a token of its own
            tokens = [
                {"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []}
                for t in self.answer.split(" ")
            ]
            answer["choices"][0]["logprobs"] = {"content": tokens}
        return Reply.json(answer)

    async def ask(self, content: str, **kwargs: Any) -> tuple[Call, bytes]:
        body = {
            "model": "small",
            "messages": [{"role": "user", "content": content}],
            **kwargs.pop("body", {}),
        }
        call = build_call(self.compiled, body, **kwargs)
        data = await read_result(await self.pipeline.run(call))
        await call.finish()
        return call, data


async def test_the_prompt_is_redacted_before_the_upstream() -> None:
    setup = Setup()
    call, _ = await setup.ask(f"Email {EMAIL} about it")
    assert setup.sent[0]["messages"][0]["content"] == "Email [REDACTED:EMAIL] about it"
    assert EMAIL not in json.dumps(call.body)  # what the cache key, the span and the log read
    assert ("pii", "email", "input", "redact") in setup.counted


async def test_a_block_is_a_400_naming_the_message() -> None:
    setup = Setup(pool=("no_secrets",))
    call = build_call(
        setup.compiled,
        {
            "model": "small",
            "messages": [{"role": "system", "content": "hi"}, {"role": "user", "content": "sk-" + "a" * 30}],
        },
    )
    with pytest.raises(InvalidRequest) as raised:
        await setup.pipeline.run(call)
    status, body, _ = render(raised.value)
    error = json.loads(body)["error"]
    assert status == 400 and error["code"] == "guardrail_blocked" and error["param"] == "messages[1].content"
    assert error["type"] == "invalid_request_error" and "sk-" not in error["message"]
    assert setup.sent == [] and setup.counted == [("no_secrets", "openai_key", "input", "block")]


async def test_a_plain_answer_is_redacted_in_place() -> None:
    setup = Setup()
    call, data = await setup.ask("hello")
    content = json.loads(data)["choices"][0]["message"]["content"]
    assert content == "Sure, I will write to [REDACTED:EMAIL]."
    assert (
        isinstance(call.result, BytesResult) and EMAIL.encode() not in call.result.body
    )  # what the cache stores
    assert ("pii", "email", "output", "redact") in setup.counted
    assert call.guards_output  # so a span capturing content records no answer before the redaction


async def test_a_redacted_answer_drops_its_logprobs_which_would_spell_the_email() -> None:
    setup = Setup()
    _, data = await setup.ask("hello", body={"logprobs": True})
    choice = json.loads(data)["choices"][0]
    assert choice["message"]["content"] == "Sure, I will write to [REDACTED:EMAIL]."
    assert choice["logprobs"] is None and EMAIL.encode() not in data
    setup.answer = "Nothing to hide here."
    _, data = await setup.ask("hello", body={"logprobs": True})
    assert json.loads(data)["choices"][0]["logprobs"]["content"][0]["token"] == "Nothing"  # untouched


async def test_a_blocked_plain_answer_is_a_400_without_a_param() -> None:
    setup = Setup(pool=("quiet",))
    body = {"model": "small", "messages": [{"role": "user", "content": "write to me"}]}
    call = build_call(setup.compiled, body)
    setup.answer = "I will WRITE   to you."
    with pytest.raises(InvalidRequest) as raised:
        await setup.pipeline.run(call)
    assert raised.value.code == "guardrail_blocked" and raised.value.param is None
    assert setup.counted == [("quiet", "block_list", "output", "block")]  # output only: the prompt passed


async def test_a_streamed_answer_is_redacted_across_the_split() -> None:
    setup = Setup()
    assert EMAIL[:5] in setup.answer[:30] and EMAIL[-5:] in setup.answer[30:]  # the email straddles two
    _, data = await setup.ask("hello", body={"stream": True})
    assert EMAIL.encode() not in data and b"jane" not in data
    text = "".join(
        json.loads(event[6:])["choices"][0]["delta"].get("content") or ""
        for event in data.split(b"\n\n")
        if event.startswith(b"data: {") and json.loads(event[6:])["choices"]
    )
    assert text == "Sure, I will write to [REDACTED:EMAIL]."


async def test_the_keys_sets_apply_after_the_pools() -> None:
    secret, key = api_key("acme", guardrails=["no_secrets"])
    setup = Setup(pool=(), keys=[key])
    with pytest.raises(InvalidRequest):
        await setup.pipeline.run(
            build_call(
                setup.compiled,
                {"model": "small", "messages": [{"role": "user", "content": "sk-" + "b" * 30}]},
                key=secret,
            )
        )
    _, data = await setup.ask("sk-" + "b" * 30)  # anonymous: the pool has no sets
    assert setup.sent[-1]["messages"][0]["content"] == "sk-" + "b" * 30 and EMAIL.encode() in data


async def test_other_endpoints_and_unguarded_pools_pass() -> None:
    setup = Setup(pool=())
    _, data = await setup.ask(f"to {EMAIL}")
    assert setup.sent[0]["messages"][0]["content"] == f"to {EMAIL}" and EMAIL.encode() in data
    assert Endpoint.EMBEDDINGS not in GuardrailsStage.endpoints


async def test_the_webhook_is_asked_about_each_message_at_once() -> None:
    async with running_guard_service() as service:
        document = policy_doc(
            guardrails={"hook": {"webhook": {"url": service.url, "on_error": "fail_closed"}}}
        )
        document["pools"]["small"]["guardrails"] = ["hook"]
        compiled = compile_doc(document)
        client = Http1UpstreamClient()
        stage = GuardrailsStage(Guardrails(client))
        try:
            messages = [{"role": "system", "content": "Alice is here"}, {"role": "user", "content": "hello"}]
            call = build_call(compiled, {"model": "small", "messages": messages})
            await stage(call)
            assert [m["content"] for m in call.body["messages"]] == ["[NAME] is here", "hello"]
            messages = [{"role": "user", "content": "fine"}, {"role": "user", "content": "slow"}]
            call = build_call(compiled, {"model": "small", "messages": messages})
            with pytest.raises(InvalidRequest) as raised:
                await stage(call)  # the service times out on the second: fail_closed
            assert raised.value.param == "messages[1].content" and raised.value.code == "guardrail_blocked"
            assert {r["text"] for r in service.requests} == {"Alice is here", "hello", "fine", "slow"}
        finally:
            await client.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayServer, FakeUpstream]]:
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url, guardrails=GUARDRAILS)
    document["pools"]["small"]["guardrails"] = ["pii"]
    document["guardrails"]["fake"] = {"block_list": {"words": ["fake upstream"], "stages": ["output"]}}
    document["pools"]["blocky"] = {"replicas": [{"base_url": upstream.base_url, "model": "echo"}]}
    document["pools"]["blocky"]["guardrails"] = ["fake"]
    server = GatewayServer(write_policy(tmp_path_factory.mktemp("guard") / "policy.yaml", document)).start()
    yield server, upstream
    server.stop()
    upstream.stop()


def test_the_access_log_and_the_upstream_never_see_the_redacted_email(
    gateway: tuple[GatewayServer, FakeUpstream],
) -> None:
    server, upstream = gateway
    lines: list[bytes] = []
    server.app.observer = Observer(GatewayTracer(None), AccessLog(lines.append))
    body = {"model": "small", "messages": [{"role": "user", "content": f"mail {EMAIL}"}]}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    server.settle()
    assert response.status_code == 200
    [line] = lines
    assert EMAIL.encode() not in line and json.loads(line)["status"] == 200
    assert upstream.requests[-1]["messages"][0]["content"] == "mail [REDACTED:EMAIL]"
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    assert (
        'sortyard_guardrail_actions_total{action="redact",check="email",guardrail="pii",stage="input"} 1.0'
        in metrics
    )


def test_a_stream_blocked_mid_way_ends_with_an_error_event(
    gateway: tuple[GatewayServer, FakeUpstream],
) -> None:
    server, _ = gateway
    body = {"model": "blocky", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    server.settle()
    assert response.status_code == 200
    events = [e for e in response.content.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]" and b"upstream" not in response.content
    assert json.loads(events[-2][6:])["error"]["code"] == "guardrail_blocked"
    assert b"Hello" in response.content  # what came before the block was sent as it came


def test_a_responses_stream_is_redacted_across_the_split_for_the_sdk(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    upstream = FakeUpstream()
    upstream.WORDS = ("Mail ", "jane.r", "oe@exa", "mple.com", " now", ".")  # its /v1/responses deltas
    upstream.start()
    document = fake_policy(upstream.base_url, guardrails=GUARDRAILS)
    document["pools"]["small"]["guardrails"] = ["pii"]
    server = GatewayServer(write_policy(tmp_path_factory.mktemp("guard") / "policy.yaml", document)).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=10)
        events = list(client.responses.create(model="small", input="hi", stream=True))
    finally:
        server.stop()
        upstream.stop()
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == "Mail [REDACTED:EMAIL] now."
    [done] = [event for event in events if event.type == "response.output_text.done"]
    assert done.text == deltas and events[-1].type == "response.completed"
    assert events[-1].response.output_text == deltas
    assert [event.sequence_number for event in events] == list(range(len(events)))
