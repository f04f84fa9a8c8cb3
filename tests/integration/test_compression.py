"""Compressed responses through a real gateway on loopback: the official openai SDK and raw HTTP as
clients, the fake upstream (and one that encodes although asked not to) behind it."""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import brotli
import openai
import pytest
import zstandard
from aiohttp import web

from gateway.compression import choose_coding
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

THRESHOLD = 64
"""Under every answer of the fake (~300 bytes): all of them are compressed for a client that asks."""
ASK: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}
DECODERS = {
    "zstd": lambda data: zstandard.ZstdDecompressor().decompress(data),
    "br": brotli.decompress,
    "gzip": gzip.decompress,
}


class EncodingUpstream(FakeUpstream):
    """The fake upstream, plus a model ``gzip-anyway`` whose answer is gzip-encoded whatever the
    gateway's ``Accept-Encoding`` says."""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("model") != "gzip-anyway":
            return await super()._chat(request)  # aiohttp keeps the body it read
        self.headers.append(dict(request.headers))
        document = {"object": "chat.completion", "choices": [], "model": "gzip-anyway"}
        return web.Response(
            body=gzip.compress(json.dumps(document).encode()),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )


@pytest.fixture(scope="module")
def upstream() -> Iterator[EncodingUpstream]:
    fake = EncodingUpstream()
    fake.start()
    yield fake
    fake.stop()


def _start(tmp_path: Path, upstream: FakeUpstream, compression: dict[str, Any]) -> GatewayServer:
    document = fake_policy(upstream.base_url, compression=compression)
    document["pools"]["encoded"] = {"replicas": [{"base_url": upstream.base_url, "model": "gzip-anyway"}]}
    return GatewayServer(write_policy(tmp_path / "policy.yaml", document)).start()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    server = _start(
        tmp_path_factory.mktemp("compressed"), upstream, {"enabled": True, "min_size_bytes": THRESHOLD}
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def default_gateway(
    tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream
) -> Iterator[GatewayServer]:
    """Compression on with the default threshold (1 KiB): above every answer of the fake."""
    server = _start(tmp_path_factory.mktemp("default"), upstream, {"enabled": True})
    yield server
    server.stop()


def _post(
    gateway: GatewayServer,
    body: dict[str, Any],
    accept_encoding: str | None,
    path: str = "/v1/chat/completions",
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request over a plain socket client that never decodes: the bytes as the gateway sent them."""
    payload = json.dumps(body).encode()
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    connection.putrequest("POST", path, skip_accept_encoding=True)  # None: no Accept-Encoding at all
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(len(payload)))
    if accept_encoding is not None:
        connection.putheader("Accept-Encoding", accept_encoding)
    connection.endheaders(payload)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, response.headers, raw


def test_the_openai_sdk_gets_a_compressed_answer_and_decodes_it(gateway: GatewayServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)
    raw = client.chat.completions.with_raw_response.create(**ASK)
    sent = raw.http_request.headers["accept-encoding"]
    assert "gzip" in sent  # httpx2: gzip, deflate (+ br and zstd when their packages are installed)
    assert raw.headers["content-encoding"] == choose_coding(sent, ("zstd", "gzip", "br"))
    assert raw.headers["vary"].lower() == "accept-encoding"
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hello from the fake upstream."
    assert completion.model == "gpt-4o-mini"


def test_the_openai_sdk_streams_uncompressed(gateway: GatewayServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)
    with client.chat.completions.with_streaming_response.create(**ASK, stream=True) as response:
        assert "content-encoding" not in response.headers
        chunks = list(response.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(
        FakeUpstream.WORDS
    )


@pytest.mark.parametrize("coding", ["zstd", "br", "gzip"])
def test_each_coding_decodes_to_the_uncompressed_answer(gateway: GatewayServer, coding: str) -> None:
    status, headers, plain = _post(gateway, ASK, "identity")
    assert status == 200 and "content-encoding" not in headers
    assert headers["vary"] == "accept-encoding"
    status, headers, encoded = _post(gateway, ASK, coding)
    assert status == 200
    assert headers["content-encoding"] == coding
    assert headers["vary"] == "accept-encoding"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(encoded) < len(plain)
    assert DECODERS[coding](encoded) == plain
    assert json.loads(plain)["model"] == "gpt-4o-mini"


@pytest.mark.parametrize(
    ("accept_encoding", "coding"),
    [
        ("gzip;q=0.5, br;q=0.9, zstd;q=0.1", "br"),
        ("zstd, br, gzip", "zstd"),
        ("*", "zstd"),
        ("zstd;q=0, *", "gzip"),  # the server's order after zstd: gzip, then br
        ("deflate", None),
        ("gzip;q=0", None),
        (None, None),
    ],
)
def test_the_client_q_values_choose(
    gateway: GatewayServer, accept_encoding: str | None, coding: str | None
) -> None:
    status, headers, body = _post(gateway, ASK, accept_encoding)
    assert status == 200 and headers.get("content-encoding") == coding
    assert int(headers["content-length"]) == len(body)
    plain = DECODERS[coding](body) if coding else body
    assert json.loads(plain)["object"] == "chat.completion"


def test_completions_and_embeddings_are_compressed_too(gateway: GatewayServer) -> None:
    status, headers, body = _post(gateway, {"model": "small", "prompt": "x"}, "gzip", "/v1/completions")
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(body))["object"] == "text_completion"
    embed = {"model": "small", "input": ["one", "two", "three"]}
    status, headers, body = _post(gateway, embed, "gzip", "/v1/embeddings")
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert len(json.loads(gzip.decompress(body))["data"]) == 3


def test_a_stream_asking_for_gzip_is_relayed_uncompressed_with_every_chunk(gateway: GatewayServer) -> None:
    status, headers, body = _post(gateway, {**ASK, "stream": True}, "gzip, br, zstd")
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in headers and "vary" not in headers
    events = [line for line in body.decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    deltas = [json.loads(e.removeprefix("data: "))["choices"][0]["delta"] for e in events[:-1]]
    assert "".join(d.get("content", "") for d in deltas) == "".join(FakeUpstream.WORDS)
    assert len(deltas) == len(FakeUpstream.WORDS) + 2  # the role first, the finish reason last


def test_a_cache_hit_is_compressed_like_a_miss(gateway: GatewayServer) -> None:
    cacheable = {**ASK, "temperature": 0, "messages": [{"role": "user", "content": "cache me"}]}
    _, miss_headers, miss = _post(gateway, cacheable, "br")
    gateway.settle()  # the miss is stored after its last byte
    _, hit_headers, hit = _post(gateway, cacheable, "gzip")
    assert (miss_headers["x-sortyard-cache"], hit_headers["x-sortyard-cache"]) == ("miss", "hit")
    assert (miss_headers["content-encoding"], hit_headers["content-encoding"]) == ("br", "gzip")
    assert hit_headers["vary"] == "accept-encoding"
    assert int(hit_headers["content-length"]) == len(hit)
    assert gzip.decompress(hit) == brotli.decompress(miss)
    _, identity_headers, plain = _post(gateway, cacheable, None)
    assert identity_headers["x-sortyard-cache"] == "hit" and "content-encoding" not in identity_headers
    assert plain == gzip.decompress(hit)


def test_an_error_above_the_threshold_is_compressed_and_the_sdk_reads_it(gateway: GatewayServer) -> None:
    missing = "no-such-model-" + "x" * 200  # the 404's message names it: a body well over the threshold
    status, headers, body = _post(gateway, {**ASK, "model": missing}, "gzip")
    assert status == 404 and headers["content-encoding"] == "gzip"
    assert int(headers["content-length"]) == len(body)
    assert json.loads(gzip.decompress(body))["error"]["code"] == "model_not_found"
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0, timeout=10)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.with_raw_response.create(**{**ASK, "model": missing})
    assert raised.value.code == "model_not_found"
    assert raised.value.response.headers["content-encoding"] in ("zstd", "br", "gzip")


def test_an_upstream_body_encoded_despite_identity_is_refused_never_relayed(
    gateway: GatewayServer, upstream: EncodingUpstream
) -> None:
    status, headers, body = _post(gateway, {**ASK, "model": "encoded"}, "gzip")
    assert upstream.headers[-1]["Accept-Encoding"] == "identity"  # what the gateway asked for
    assert status == 502
    plain = gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body
    assert json.loads(plain)["error"]["code"] == "upstream_protocol_error"


def test_the_default_threshold_leaves_small_answers_and_errors_alone(default_gateway: GatewayServer) -> None:
    status, headers, body = _post(default_gateway, ASK, "gzip, br, zstd")
    assert status == 200 and len(body) < 1024
    assert "content-encoding" not in headers and "vary" not in headers
    assert json.loads(body)["model"] == "gpt-4o-mini"
    status, headers, body = _post(default_gateway, {**ASK, "model": "nope"}, "gzip, br, zstd")
    assert status == 404 and "content-encoding" not in headers
    assert json.loads(body)["error"]["code"] == "model_not_found"
