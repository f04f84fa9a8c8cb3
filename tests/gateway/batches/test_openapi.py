"""The Files and Batch APIs' OpenAPI part names exactly the routes served, and its schemas build."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from gateway.batches.openapi import BATCH_PATHS, BATCH_STRUCTS
from tests.gateway.batches.conftest import policy_document, start_gateway, write
from tools.servers.fake_upstream import FakeUpstream


def test_the_paths_are_the_routes(tmp_path: Path, upstream: FakeUpstream) -> None:
    server, feature = start_gateway(write(tmp_path, policy_document(upstream, tmp_path / "files")))
    server.stop()
    served = {
        (re.sub(r"\{(\w+):\w+\}", r"{\1}", next(iter(handler.paths))), method.lower())
        for handler in feature.routes
        for method in handler.http_methods
    }
    documented = {(path, method) for path, methods in BATCH_PATHS.items() for method in methods}
    assert documented == served


def test_the_schemas_build() -> None:
    _, schemas = msgspec.json.schema_components(BATCH_STRUCTS, ref_template="#/components/schemas/{name}")
    referenced = set(re.findall(r"#/components/schemas/(\w+)", msgspec.json.encode(BATCH_PATHS).decode()))
    assert referenced - {"ErrorEnvelope"} <= set(schemas)


def test_the_documented_endpoints_and_windows_are_the_served_ones() -> None:
    from typing import get_args

    from gateway.batches.openapi import Endpoint
    from gateway.batches.records import COMPLETION_WINDOW_S, URLS

    assert set(get_args(Endpoint)) == set(URLS)
    assert set(COMPLETION_WINDOW_S) == {"24h"}
