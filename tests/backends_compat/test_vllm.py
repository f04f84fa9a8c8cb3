"""``kind: vllm`` against the real vLLM: its CPU build serving SmolLM2-135M, behind a real gateway.

One vLLM server for the module (``tests/support/vllm_server.py``: set up from the registries when
missing, skipped only when that install cannot be done; fp32, 1 GiB of KV cache, ``--max-model-len
2048``, two OpenMP threads). Pool ``vllm`` reaches it through a ``CutProxy`` (``cut()``: the server
killed mid-stream); pool ``vllm-pair`` has two replicas, each through its own ``CutProxy`` to the same
server (two cores afford one). The pair's replica ``a`` reads its load from a ``WireFake`` playing
vLLM's own ``/metrics`` page (``wire/vllm-metrics.json``, recorded from this server: idle, and a busy
one for ``make_busy``); replica ``b`` reads the real server's page at its kind's default path.

Beyond ``CompatScenarios``: the real ``/metrics`` page parses into the ``ReplicaLoad`` it states and
the gateway's scrape of it fills the replica's state; a stream's chunks, ``system_fingerprint`` and
usage arrive as vLLM sent them; the Responses API (plain and streamed) passes through; vLLM's own
refusal reaches the client unchanged; vLLM's KV-cache events (``--kv-events-config``) steer a
gateway's KV-aware picks.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.adapters import ReplicaLoad, parse_vllm_metrics
from gateway.replicas.state import ReplicaState
from tests.backends_compat.scenarios import MESSAGES, CompatScenarios, Target, compat_policy, wait_until
from tests.support.calls import api_key
from tests.support.cut_proxy import CutProxy
from tests.support.vllm_server import START_TIMEOUT_S, VllmServer, VllmUnavailable, ensure_vllm
from tests.support.wire_fake import WireFake, load_transcript
from tools.servers.gateway_server import GatewayServer, write_policy

SETUP_TIMEOUT_S = 1800 + START_TIMEOUT_S
"""The first test's setup installs vLLM's venv when a machine has none (minutes from the registries),
then starts it: the suite's 300 s would cut it."""
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SETUP_TIMEOUT_S)]

SERVED = "smollm2-135m"
"""vLLM's ``--served-model-name``: what the gateway asks the replica for."""
LONG: dict[str, Any] = {"max_tokens": 200, "extra_body": {"ignore_eos": True}}
"""A stream still running when its first chunk arrives (vLLM's ``ignore_eos``: no early end)."""
TOO_LONG: dict[str, Any] = {"max_tokens": 4000}
"""More than ``--max-model-len 2048``: only vLLM refuses it (400)."""
CHAT = cast(list[ChatCompletionMessageParam], MESSAGES)


@dataclass
class Deployment:
    vllm: VllmServer
    gateway: GatewayServer
    single: CutProxy
    pair: tuple[CutProxy, CutProxy]
    metrics: WireFake
    """Replica ``a``'s load page."""

    def states(self) -> tuple[ReplicaState, ReplicaState]:
        by_name = {s.replica.name: s for s in self.gateway.gateway.balancer.replicas("vllm-pair")}
        return by_name["vllm-a"], by_name["vllm-b"]

    def direct(self) -> openai.OpenAI:
        """An SDK client of the vLLM server itself, past the gateway."""
        return openai.OpenAI(base_url=self.vllm.origin + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    try:
        setup = ensure_vllm()
    except VllmUnavailable as error:
        pytest.skip(f"vLLM's CPU build cannot be installed here: {error}")
    server = VllmServer(setup, tmp_path_factory.mktemp("vllm") / "vllm.log", served_model_name=SERVED)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def deployment(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    single, a, b = (CutProxy(vllm.port).start() for _ in range(3))
    metrics = WireFake(load_transcript("vllm-metrics")).start()
    policy = compat_policy("vllm", single.origin, (a.origin, b.origin), model=SERVED)
    policy["pools"]["vllm-pair"]["replicas"][0]["metrics_url"] = metrics.origin + "/metrics"
    path = write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml", policy)
    gateway = GatewayServer(path).start()
    try:
        yield Deployment(vllm, gateway, single, (a, b), metrics)
    finally:
        gateway.stop()
        metrics.stop()
        for proxy in (single, a, b):
            proxy.stop()


@pytest.fixture
def deployed(deployment: Deployment) -> Iterator[Deployment]:
    """The module's deployment; a test that leaves vLLM dead fails with its log's tail."""
    assert deployment.vllm.alive(), f"vLLM is not running:\n{deployment.vllm.log_tail()}"
    yield deployment
    assert deployment.metrics.unmatched == []  # the gateway asked replica a's page only for /metrics
    if not deployment.vllm.alive():
        pytest.fail(f"vLLM died:\n{deployment.vllm.log_tail()}")


def _metrics_response(name: str) -> dict[str, Any]:
    exchange = next(e for e in load_transcript("vllm-metrics")["exchanges"] if e["name"] == name)
    response: dict[str, Any] = exchange["response"]
    return response


BUSY = parse_vllm_metrics("".join(_metrics_response("metrics-busy")["chunks"]).encode())


@contextlib.contextmanager
def _busy(deployment: Deployment) -> Iterator[Callable[[], bool]]:
    """Replica ``a``'s load page says busy until the block ends; returns once the gateway read it, and
    yields whether its reading is still fresh."""
    state = deployment.states()[0]
    balancer = deployment.gateway.gateway.balancer

    def reads(load: ReplicaLoad | None) -> bool:
        assert load is not None
        figures = (state.num_waiting, state.num_running, state.kv_cache_usage)
        return figures == (load.num_waiting, load.num_running, load.kv_cache_usage) and (
            balancer.clock() <= state.load_fresh_until
        )

    deployment.metrics.overrides["metrics"] = _metrics_response("metrics-busy")
    try:
        wait_until(lambda: reads(BUSY), what="the gateway to scrape replica a's busy page")
        yield lambda: reads(BUSY)
    finally:
        del deployment.metrics.overrides["metrics"]
        idle = parse_vllm_metrics("".join(_metrics_response("metrics")["chunks"]).encode())
        wait_until(lambda: reads(idle), what="the gateway to scrape replica a's idle page")


class TestVllm(CompatScenarios):
    @pytest.fixture
    def target(self, deployed: Deployment) -> Target:
        return Target(
            kind="vllm",
            gateway_url=deployed.gateway.url,
            cut=deployed.single.cut,
            cut_request=LONG,
            rejected=TOO_LONG,
            rejected_status=400,
            make_busy=lambda: _busy(deployed),
            served=lambda: (deployed.states()[0].num_requests, deployed.states()[1].num_requests),
        )


def _gateway_client(deployment: Deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)


_SAMPLE = re.compile(rb"^(vllm:[a-z_]+)\{[^}]*\} (\S+)$", re.MULTILINE)


def _stated(page: bytes, name: bytes) -> list[float]:
    """The samples of ``name`` on a Prometheus page, read independently of the gateway's parser."""
    return [float(value) for metric, value in _SAMPLE.findall(page) if metric == name]


def test_the_real_metrics_page_is_read_into_the_replicas_load(deployed: Deployment) -> None:
    """While a request runs on vLLM, its own page states one running: parsed, and scraped."""
    b = deployed.states()[1]
    assert b.metrics_url == deployed.pair[1].origin + "/metrics"  # kind vllm's own load page
    # what earlier tests started has ended (a cut stream is aborted by vLLM when its client goes)
    wait_until(lambda: b.num_running == 0, what="vLLM to run nothing", timeout_s=60)
    stream = deployed.direct().chat.completions.create(
        model=SERVED, messages=CHAT, stream=True, max_tokens=1500, extra_body={"ignore_eos": True}
    )  # vLLM's ignore_eos: it runs until the stream is closed
    with stream:
        next(iter(stream))
        wait_until(lambda: b.num_running == 1, what="the gateway to scrape one running request")
        page = httpx.get(deployed.vllm.origin + "/metrics").content
        load = parse_vllm_metrics(page)
        assert load is not None
        running = _stated(page, b"vllm:num_requests_running")
        waiting = _stated(page, b"vllm:num_requests_waiting")
        kv = _stated(page, b"vllm:kv_cache_usage_perc")
        assert (running, waiting) == ([1.0], [0.0]) and len(kv) == 1 and 0 < kv[0] < 1, page
        assert load == ReplicaLoad(num_waiting=waiting[0], num_running=running[0], kv_cache_usage=kv[0])
        assert b.num_waiting == 0 and 0 < b.kv_cache_usage < 1
    # the stream closed: vLLM aborts the request, and its page says so
    wait_until(lambda: b.num_running == 0, what="the gateway to scrape no running request")


def _chunks(client: openai.OpenAI, model: str) -> list[dict[str, Any]]:
    stream = client.chat.completions.create(
        model=model,
        messages=CHAT,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    return [chunk.model_dump(exclude={"id", "created", "model"}) for chunk in stream]


def test_a_stream_arrives_as_vllm_sent_it(deployed: Deployment) -> None:
    """Chunks, ``system_fingerprint``, finish reason and the usage chunk, through the gateway and not."""
    direct = _chunks(deployed.direct(), SERVED)
    through = _chunks(_gateway_client(deployed), "vllm")
    assert through == direct
    assert direct[-1]["choices"] == [] and direct[-1]["usage"]["completion_tokens"] == 8
    assert {chunk["system_fingerprint"] for chunk in direct} == {
        chunk["system_fingerprint"] for chunk in through
    }
    # the raw wire: OpenAI chunks, the usage chunk last, then [DONE]
    body = {
        "model": "vllm",
        "messages": CHAT,
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    raw = httpx.post(deployed.gateway.url + "/v1/chat/completions", json=body, timeout=60)
    events = [line[6:] for line in raw.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 4 and last["model"] == "vllm"


def test_vllms_refusal_reaches_the_client_unchanged(deployed: Deployment) -> None:
    with pytest.raises(openai.BadRequestError) as direct:
        deployed.direct().chat.completions.create(model=SERVED, messages=CHAT, max_tokens=4000)
    with pytest.raises(openai.BadRequestError) as through:
        _gateway_client(deployed).chat.completions.create(model="vllm", messages=CHAT, max_tokens=4000)
    assert through.value.body == direct.value.body
    assert isinstance(direct.value.body, dict) and "2048" in direct.value.body["message"]


def test_the_responses_api_passes_through(deployed: Deployment) -> None:
    arguments: dict[str, Any] = {"input": "Write one sentence about the sea.", "max_output_tokens": 8}
    arguments["temperature"] = 0
    direct = deployed.direct().responses.create(model=SERVED, **arguments)
    plain = _gateway_client(deployed).responses.create(model="vllm", **arguments)
    assert plain.model == "vllm" and plain.status == direct.status
    assert plain.output_text == direct.output_text and plain.output_text
    assert plain.usage is not None and direct.usage is not None
    assert (plain.usage.input_tokens, plain.usage.output_tokens) == (
        direct.usage.input_tokens,
        direct.usage.output_tokens,
    )
    deltas, completed = [], None
    with _gateway_client(deployed).responses.create(model="vllm", stream=True, **arguments) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                completed = event.response
    assert "".join(deltas) == plain.output_text
    assert completed is not None and completed.model == "vllm" and completed.usage is not None
    assert completed.usage.output_tokens == plain.usage.output_tokens


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_tool_calls_come_through_as_vllm_made_them(deployed: Deployment, tool_choice: Any) -> None:
    """vLLM forces the call (its guided decoding, with the Hermes parser the server runs with); the gateway
    relays it. Its argument text is the model's (SmolLM2 writes odd ones), so only the shape is held."""
    arguments: dict[str, Any] = {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": tool_choice,
        "max_tokens": 128,
        "temperature": 0,
    }
    through = _gateway_client(deployed).chat.completions.create(model="vllm", **arguments)
    message = through.choices[0].message
    calls = message.tool_calls
    assert calls and [call.function.name for call in calls] == ["get_weather"] * len(calls), message.content
    assert through.model == "vllm" and through.choices[0].finish_reason in ("tool_calls", "stop")


def test_structured_outputs_come_through(deployed: Deployment) -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    parsed = _gateway_client(deployed).chat.completions.parse(
        model="vllm",
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format=City,
        max_tokens=64,
        temperature=0,
    )
    assert isinstance(parsed.choices[0].message.parsed, City)


def test_a_responses_conversation_keeps_its_state_in_the_gateway(deployed: Deployment) -> None:
    client = _gateway_client(deployed)
    first = client.responses.create(model="vllm", input="Name a colour.", max_output_tokens=8, temperature=0)
    second = client.responses.create(
        model="vllm", input="Another one.", previous_response_id=first.id, max_output_tokens=8, temperature=0
    )
    assert second.status in ("completed", "incomplete") and second.output_text
    items = client.responses.input_items.list(second.id).data
    assert any("Name a colour." in str(item.model_dump()) for item in items)
    assert client.responses.retrieve(first.id).output_text == first.output_text


def test_the_gateway_learns_vllms_blocks_from_its_kv_events(
    deployed: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """vLLM's own KV events (``--kv-events-config``) steer the pick: a repeat of a prompt is routed to
    the replica whose events announced all of its whole blocks (vLLM's block size, its chat template).
    The replicas take the tenant's cache salt, which vLLM reports in the first block's ``extra_keys``:
    another tenant's copy of the same prompt finds none of those blocks."""
    vllm = deployed.vllm
    pair = (deployed.pair[0].origin, deployed.pair[1].origin)
    policy = compat_policy("vllm", deployed.single.origin, pair, model=SERVED, send_cache_salt=True)
    policy["kv_routing"] = {
        "pools": {"vllm-pair": {"tokenizer": str(vllm.model_dir), "replicas": {"vllm-a": vllm.kv_source}}}
    }  # both replicas reach the one server; only vllm-a's events are followed
    (north, north_entry), (south, south_entry) = api_key("north"), api_key("south")
    policy["auth"], policy["keys"] = {"required": True}, [north_entry, south_entry]
    gateway = GatewayServer(write_policy(tmp_path_factory.mktemp("kv") / "policy.yaml", policy)).start()
    system = " ".join(f"Rule {i}: answer in one short sentence about topic {i}." for i in range(40))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Name a colour."}]
    seen: list[str] = []

    def send(key: str) -> str:
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=60) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="vllm-pair", messages=cast(list[ChatCompletionMessageParam], messages), max_tokens=1
            )
        seen.append(raw.headers.get("x-sortyard-route-reason", ""))
        return seen[-1]

    try:  # the first request prefills and vLLM publishes; the tokenizer loads on first use
        wait_until(
            lambda: re.search(r"kv:[1-9]\d*/\d+ blocks@vllm-a$", send(north)) is not None,
            what="a KV hit on vllm-a",
            timeout_s=60,
        )
        found = re.search(r"kv:(\d+)/(\d+) blocks@vllm-a$", seen[-1])
        assert found and int(found[1]) == int(found[2]) >= 3, seen  # every whole block: same tokens as vLLM
        assert re.search(r"kv:0/\d+ blocks$", send(south)), seen  # north's blocks are not south's
    except AssertionError as error:
        raise AssertionError(f"{error}; route reasons: {seen[-5:]}") from None
    finally:
        gateway.stop()
