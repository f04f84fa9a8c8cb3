"""A fake OpenAI-compatible upstream on a real loopback port, for gateway tests and benchmarks.

Its behaviour is chosen by the (served) model name the gateway forwards, so one server can play
every replica of a test policy:

- ``echo``          a normal chat / completion / embedding response (and SSE stream)
- ``fail-500``      HTTP 500
- ``reject-400``    an OpenAI-shaped 400
- ``hang``          accepts and never answers (a client that closes the connection is counted in
                    ``num_hangs_abandoned``: how a test sees a plain request aborted upstream)
- ``bad-json``      200 with a body that is not JSON
- ``malformed-sse`` a stream whose second event is not JSON
- ``cut-stream``    a stream that stops (connection closed) after two events
- ``stall-stream``  a stream that sends its role and first two words, then nothing (idle timeouts)
- ``slow-stream``   a stream with one event per 50 ms, 200 events (for disconnect tests)
- ``slow-body``     200 and its headers at once, then a JSON body trickled over ~3 s (total timeouts)
- ``slow-echo``     like ``echo`` after 300 ms (for single-flight tests)
- ``gated``         like ``echo``, once the test lets it through: each ``open_gate()`` lets one
                    waiting (or later) request answer, so a test decides when a replica slot frees
- ``ratelimited``   an OpenAI-shaped 429
- ``slow-start``    like ``echo``, but the answer starts after ``slow_start_s`` (0.5 s): a plain
                    response's headers come with its body then (as vLLM sends them, when generation
                    ends); a stream's headers come at once and its first event then
- ``vllm-stream``   a chat stream as vLLM sends it: ``system_fingerprint`` on the finish chunk, or on
                    the usage chunk instead when ``include_usage`` is on; ``continuous_usage_stats``
                    (with ``include_usage`` only) puts the usage so far on every chunk

vLLM's other routes (the Responses API, ``/tokenize``, ``/detokenize``) are in ``fake_vllm.py``.

Embeddings are ``fake_vector(model, text)``: three floats derived from the served model and the
input, so every input (and every model) gets its own vector.

Every request's JSON body is recorded in ``requests``; streams the client abandoned are counted
in ``num_streams_cancelled`` with the time the upstream noticed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from typing import Any

from aiohttp import web

from tools.servers.fake_vllm import FINGERPRINT, add_vllm_routes
from tools.servers.redis_server import free_port


def fake_vector(model: str, text: object) -> list[float]:
    """The fake's embedding of ``text`` (a string, or a token list) under ``model``: deterministic,
    and distinct per input and model."""
    seed = text if isinstance(text, str) else json.dumps(text)
    digest = hashlib.sha256(f"{model}\0{seed}".encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "big") / 2**32 for i in (0, 4, 8)]


def _chat_body(model: str, content: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
    }


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        **extra,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _usage_chunk(model: str, usage: tuple[int, int], **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
        **extra,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _usage(num_prompt: int, num_output: int) -> dict[str, int]:
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_output,
        "total_tokens": num_prompt + num_output,
    }


class FakeUpstream:
    """Runs an aiohttp server in its own thread and event loop."""

    WORDS = ("Hello", " from", " the", " fake", " upstream", ".")

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.num_streams_cancelled = 0
        self.num_hangs_abandoned = 0
        self.cancelled_at: list[float] = []
        self.slow_start_s = 0.5
        self._gate: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/health", self._health)
        add_vllm_routes(app, self)
        return app

    async def _hang(self, request: web.Request) -> None:
        """Never answer; count the request when its client closes the connection."""
        while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        self.num_hangs_abandoned += 1
        raise asyncio.CancelledError  # nobody is left to answer

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _common(self, request: web.Request) -> tuple[dict[str, Any], str, web.Response | None]:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        model = body.get("model", "")
        if model == "fail-500":
            return body, model, web.Response(status=500, text="internal kaboom")
        if model == "reject-400":
            return (
                body,
                model,
                web.json_response(
                    {
                        "error": {
                            "message": "bad thing",
                            "type": "invalid_request_error",
                            "param": "x",
                            "code": "bad",
                        }
                    },
                    status=400,
                ),
            )
        if model == "hang":
            await self._hang(request)
        if model == "slow-echo":
            await asyncio.sleep(0.3)
        if model == "gated":
            assert self._gate is not None
            await self._gate.acquire()
        if model == "ratelimited":
            return (
                body,
                model,
                web.json_response(
                    {
                        "error": {
                            "message": "slow down",
                            "type": "rate_limit_error",
                            "param": None,
                            "code": "rate_limit_exceeded",
                        }
                    },
                    status=429,
                    headers={"Retry-After": "1"},
                ),
            )
        if model == "bad-json":
            return (
                body,
                model,
                web.Response(status=200, text="<html>not json</html>", content_type="application/json"),
            )
        return body, model, None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, model, early = await self._common(request)
        if early is not None:
            return early
        if model == "slow-body":
            return await self._slow_body(
                request, _chat_body(model, "".join(self.WORDS), (11, len(self.WORDS)))
            )
        if not body.get("stream"):
            if model == "slow-start":
                await asyncio.sleep(self.slow_start_s)
            return web.json_response(_chat_body(model, "".join(self.WORDS), (11, len(self.WORDS))))
        return await self._stream(request, body, model)

    async def _slow_body(self, request: web.Request, document: dict[str, Any]) -> web.StreamResponse:
        payload = json.dumps(document).encode()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(payload)
        await response.prepare(request)
        step = max(1, len(payload) // 30)
        for start in range(0, len(payload), step):  # ~30 pieces, 100 ms apart
            await response.write(payload[start : start + step])
            await asyncio.sleep(0.1)
        await response.write_eof()
        return response

    async def _stream(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        if model == "vllm-stream":
            await self._vllm_stream(
                response, model, include_usage, bool(options.get("continuous_usage_stats"))
            )
            return response
        try:
            if model == "slow-start":
                await asyncio.sleep(self.slow_start_s)
            if model == "slow-stream":
                for i in range(200):
                    await response.write(_chunk(model, {"content": f"t{i} "}))
                    await asyncio.sleep(0.05)
            await response.write(_chunk(model, {"role": "assistant", "content": ""}))
            for i, word in enumerate(self.WORDS):
                if model == "malformed-sse" and i == 1:
                    await response.write(b"data: {this is not json\n\n")
                    continue
                if model == "cut-stream" and i == 2:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if model == "stall-stream" and i == 2:
                    await asyncio.sleep(3600)
                await response.write(_chunk(model, {"content": word}))
            await response.write(_chunk(model, {}, "stop"))
            if include_usage:
                await response.write(_usage_chunk(model, (11, len(self.WORDS))))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.num_streams_cancelled += 1
            self.cancelled_at.append(time.monotonic())
            raise
        return response

    async def _vllm_stream(
        self, response: web.StreamResponse, model: str, include_usage: bool, continuous: bool
    ) -> None:
        """vLLM's chat stream: the fingerprint moves to the usage chunk when usage is on; continuous
        usage stats count only with include_usage."""
        continuous = continuous and include_usage
        await response.write(
            _chunk(model, {"role": "assistant", "content": ""}, **self._so_far(continuous, 0))
        )
        for i, word in enumerate(self.WORDS[:-1]):
            await response.write(_chunk(model, {"content": word}, **self._so_far(continuous, i + 1)))
        last = {"system_fingerprint": FINGERPRINT} if not include_usage else {}
        finish = self._so_far(continuous, len(self.WORDS))
        await response.write(_chunk(model, {"content": self.WORDS[-1]}, "stop", **last, **finish))
        if include_usage:
            usage = (11, len(self.WORDS))
            await response.write(_usage_chunk(model, usage, system_fingerprint=FINGERPRINT))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()

    @staticmethod
    def _so_far(continuous: bool, num_output: int) -> dict[str, Any]:
        return {"usage": _usage(11, num_output)} if continuous else {}

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body, model, early = await self._common(request)
        if early is not None:
            return early
        usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "created": 1,
                    "model": model,
                    "choices": [{"index": 0, "text": " done.", "finish_reason": "stop", "logprobs": None}],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for text, finish in ((" do", None), ("ne.", "stop")):
            chunk = {
                "id": "cmpl-fake",
                "object": "text_completion",
                "created": 1,
                "model": model,
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            }
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _embeddings(self, request: web.Request) -> web.Response:
        body, model, early = await self._common(request)
        if early is not None:
            return early
        raw = body["input"]  # a string, a token list, or a list of either
        inputs = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(model, text)}
            for i, text in enumerate(inputs)
        ]
        return web.json_response(
            {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": 4, "total_tokens": 4}}
        )

    def start(self) -> FakeUpstream:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._gate = asyncio.Semaphore(0)
            # stop() cancels what still runs (a "hang", a stalled stream) instead of waiting for it
            self._runner = web.AppRunner(self._app(), handle_signals=False, shutdown_timeout=0.1)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            loop.run_until_complete(site.start())
            self._started.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            pending = asyncio.all_tasks(loop)
            if pending:
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.wait(pending))
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    def open_gate(self, n: int = 1) -> None:
        """Let ``n`` ``gated`` requests answer: those waiting, else the next to arrive."""
        assert self._loop is not None and self._gate is not None, "not started"
        for _ in range(n):
            self._loop.call_soon_threadsafe(self._gate.release)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
