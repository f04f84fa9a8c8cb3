"""llama.cpp's load pages as a ``ReplicaLoad``: ``/slots``, ``/metrics``, and pages without load."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.adapters.llamacpp import LlamaCppAdapter
from gateway.adapters.load import ReplicaLoad
from tests.gateway.adapters.llamacpp.wire import METRICS


def _slot(processing: bool, tokens: int | None = None, n_ctx: int = 2048) -> dict[str, Any]:
    slot: dict[str, Any] = {"id": 0, "n_ctx": n_ctx, "speculative": False, "is_processing": processing}
    if tokens is not None:
        slot.update(
            {
                "id_task": 2,
                "n_prompt_tokens": tokens,
                "n_prompt_tokens_processed": 0,
                "n_prompt_tokens_cache": 0,
                "next_token": [
                    {"has_next_token": True, "has_new_line": False, "n_remain": 60, "n_decoded": 0}
                ],
            }
        )
    return slot


@pytest.mark.parametrize(
    ("slots", "load"),
    [
        ([_slot(False)], ReplicaLoad(0.0, 0.0, 0.0)),
        ([_slot(True, 512)], ReplicaLoad(0.0, 1.0, 0.25)),
        ([_slot(True, 512, 1024), _slot(False, 900, 1024)], ReplicaLoad(0.0, 1.0, 0.25)),
        ([_slot(True, 1024, 1024), _slot(True, 1024, 1024)], ReplicaLoad(0.0, 2.0, 1.0)),
        ([{"id": 0, "is_processing": True, "next_token": {"n_decoded": 3}}], ReplicaLoad(0.0, 1.0, 0.0)),
        ([], ReplicaLoad(0.0, 0.0, 0.0)),
    ],
)
def test_slots_page(slots: list[dict[str, Any]], load: ReplicaLoad) -> None:
    assert LlamaCppAdapter().parse_load(msgspec.json.encode(slots)) == load


def test_metrics_page() -> None:
    adapter = LlamaCppAdapter()
    assert adapter.parse_load(METRICS) == ReplicaLoad(2.0, 1.0, 0.0)
    older = METRICS + b"llamacpp:kv_cache_usage_ratio 0.375\nllamacpp:kv_cache_tokens 768\n"
    assert adapter.parse_load(older) == ReplicaLoad(2.0, 1.0, 0.375)


@pytest.mark.parametrize(
    "page",
    [
        b'{"error":{"code":501,"message":"This server does not support slots endpoint.",'
        b'"type":"not_supported_error"}}',
        b"[not json",
        b"# nothing here\nother_metric 1\n",
        b"",
    ],
)
def test_pages_without_load(page: bytes) -> None:
    assert LlamaCppAdapter().parse_load(page) is None
