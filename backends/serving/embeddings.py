"""``POST /v1/embeddings``: served by the embedder next to the engine, in a worker thread."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

from litestar import Request, Response

from backends.serving.errors import InvalidRequest
from backends.serving.params import decode_request
from backends.serving.protocol import Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage, encoder
from backends.serving.state import ServingState

MAX_INPUTS = 2048
"""OpenAI's limit on inputs per request."""


def input_texts(value: str | list[Any]) -> list[str]:
    """The request's input as a list of non-empty strings (token-id inputs are not served)."""
    texts = [value] if isinstance(value, str) else value
    if not texts:
        raise InvalidRequest("input must not be empty", param="input")
    if len(texts) > MAX_INPUTS:
        raise InvalidRequest(f"input may hold at most {MAX_INPUTS} items", param="input")
    if not all(isinstance(t, str) for t in texts):
        raise InvalidRequest("input must be a string or a list of strings", param="input")
    if not all(texts):
        raise InvalidRequest("input strings must not be empty", param="input")
    return texts


def encode_base64(vector: list[float]) -> str:
    # OpenAI's base64 format: little-endian float32
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


async def create_embeddings(state: ServingState, request: Request[Any, Any, Any]) -> Response[Any]:
    body = decode_request(await request.body(), EmbeddingRequest)
    embedder = state.require_embedder(body.model)
    texts = input_texts(body.input)
    if body.encoding_format not in ("float", "base64"):
        raise InvalidRequest("encoding_format must be 'float' or 'base64'", param="encoding_format")
    if body.dimensions is not None:
        raise InvalidRequest("dimensions is not supported by this model", param="dimensions")
    vectors, num_tokens = await asyncio.to_thread(embedder.embed, texts)
    is_base64 = body.encoding_format == "base64"
    result = EmbeddingList(
        data=[
            Embedding(index=i, embedding=encode_base64(v) if is_base64 else v) for i, v in enumerate(vectors)
        ],
        model=embedder.model_name,
        usage=EmbeddingUsage(prompt_tokens=num_tokens, total_tokens=num_tokens),
    )
    return Response(encoder.encode(result), media_type="application/json")
