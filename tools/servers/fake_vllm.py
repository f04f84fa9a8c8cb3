"""The fake upstream's vLLM routes beyond chat, completions and embeddings (``fake_upstream.py``).

- ``POST /v1/responses`` (the Responses API): plain, a response object; streamed (``stream: true``),
  OpenAI's event sequence, one word a ``response.output_text.delta``, each event an ``event:`` line and
  a ``data:`` line, and no ``[DONE]``: the stream ends after ``response.completed``, whose
  ``response.usage`` holds ``input_tokens`` and ``output_tokens``. The fake's failure models
  (``fail-500``, ``reject-400``, ...) answer here too; ``cut-stream`` closes the connection after two
  deltas.
- ``POST /tokenize`` and ``POST /detokenize``, at the server's root as vLLM serves them: a token is a
  character's code point; ``messages`` are rendered with a toy chat template first.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from aiohttp import web

FINGERPRINT = "fp_fake"
RESPONSE_ID = "resp_fake"
RESPONSE_USAGE = (13, 6)
"""(input, output) tokens every response reports: the output is the six words of ``FakeUpstream.WORDS``."""
MAX_MODEL_LEN = 4096


class Upstream(Protocol):
    """What these routes ask of ``fake_upstream.FakeUpstream``: its words, and the checks every route
    makes first (the body, the served model, and the early answer of a failure model, if any)."""

    @property
    def WORDS(self) -> tuple[str, ...]: ...

    async def _common(self, request: web.Request) -> tuple[dict[str, Any], str, web.Response | None]: ...


def add_vllm_routes(app: web.Application, fake: Upstream) -> None:
    routes = VllmRoutes(fake)
    app.router.add_post("/v1/responses", routes.responses)
    app.router.add_post("/tokenize", routes.tokenize)
    app.router.add_post("/detokenize", routes.detokenize)


def render(body: dict[str, Any]) -> str:
    """What ``/tokenize`` counts: the prompt, or the messages in the toy template."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return str(body.get("prompt", ""))
    text = "".join(f"<{m.get('role')}>{m.get('content')}" for m in messages)
    return text + ("<assistant>" if body.get("add_generation_prompt", True) else "")


def _message(text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"id": "msg_fake", "type": "message", "role": "assistant", "status": status, "content": [part]}


def response_object(model: str, status: str, output: list[dict[str, Any]], *, usage: bool) -> dict[str, Any]:
    num_input, num_output = RESPONSE_USAGE
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": 1,
        "model": model,
        "status": status,
        "output": output,
        "usage": {
            "input_tokens": num_input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": num_output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": num_input + num_output,
        }
        if usage
        else None,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
    }


class VllmRoutes:
    def __init__(self, fake: Upstream) -> None:
        self.fake = fake

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body, model, early = await self.fake._common(request)
        if early is not None:
            return early
        text = "".join(self.fake.WORDS)
        if not body.get("stream"):
            output = [_message(text, "completed")]
            return web.json_response(response_object(model, "completed", output, usage=True))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = Events()
        await response.write(
            events("response.created", response=response_object(model, "in_progress", [], usage=False))
        )
        await response.write(
            events("response.in_progress", response=response_object(model, "in_progress", [], usage=False))
        )
        item: dict[str, Any] = {**_message("", "in_progress"), "content": []}
        await response.write(events("response.output_item.added", output_index=0, item=item))
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": "msg_fake", "output_index": 0, "content_index": 0}
        await response.write(events("response.content_part.added", **where, part=part))
        for i, word in enumerate(self.fake.WORDS):
            if model == "cut-stream" and i == 2:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write(events("response.output_text.delta", **where, delta=word, logprobs=[]))
        await response.write(events("response.output_text.done", **where, text=text, logprobs=[]))
        await response.write(events("response.content_part.done", **where, part={**part, "text": text}))
        done = _message(text, "completed")
        await response.write(events("response.output_item.done", output_index=0, item=done))
        completed = response_object(model, "completed", [done], usage=True)
        await response.write(events("response.completed", response=completed))
        await response.write_eof()
        return response

    async def tokenize(self, request: web.Request) -> web.Response:
        body, _, early = await self.fake._common(request)
        if early is not None:
            return early
        tokens = [ord(c) for c in render(body)]
        return web.json_response(
            {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens, "token_strs": None}
        )

    async def detokenize(self, request: web.Request) -> web.Response:
        body, _, early = await self.fake._common(request)
        if early is not None:
            return early
        return web.json_response({"prompt": "".join(chr(token) for token in body.get("tokens", []))})


class Events:
    """A Responses stream's events, numbered in order."""

    def __init__(self) -> None:
        self.num_sent = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.num_sent, **fields}
        self.num_sent += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
