"""``/v1/embeddings`` with a fake embedder: vectors, usage, refusals."""

from __future__ import annotations

import base64
import struct

import openai

from tests.backends.serving.harness import assert_error, post


def test_embeddings_with_fake_embedder(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="all-minilm-l6-v2", input=["a b", "c"])
    assert [d.index for d in result.data] == [0, 1]
    assert result.data[0].embedding == [1.0, 0.0, 0.0]
    assert result.usage.prompt_tokens == 3
    as_base64 = client.embeddings.create(model="all-minilm-l6-v2", input="a", encoding_format="base64")
    raw = base64.b64decode(as_base64.data[0].embedding)  # type: ignore[arg-type]
    assert struct.unpack("<3f", raw) == (1.0, 0.0, 0.0)


def test_bad_embedding_requests_are_400(base_url: str) -> None:
    model = "all-minilm-l6-v2"
    for body in ({"model": model, "input": []}, {"model": model, "input": [1, 2]}, {"model": model},
                 {"model": model, "input": "x", "encoding_format": "int8"}):  # fmt: skip
        assert_error(post(base_url, "/v1/embeddings", body), 400)
