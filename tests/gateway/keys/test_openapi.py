"""gateway/keys/openapi.py: the key admin API's operations are its routes', and they name only the
schemas the document holds."""

from __future__ import annotations

import json
import re
from typing import Any

from litestar import Request, Response

from gateway.compiled import CompiledPolicy
from gateway.errors import GatewayError
from gateway.keys import FileKeyStore, KeyAdmin, KeyRegistry
from gateway.keys.openapi import KEY_PATHS, KEY_STRUCTS
from gateway.keys.routes import key_admin_routes
from gateway.openapi import build_document
from gateway.policy import ApiKey
from gateway.schemas import decode_as

NOT_CALLED = "no route is called here"


def _compiled() -> CompiledPolicy:
    raise AssertionError(NOT_CALLED)


async def _authenticate(compiled: CompiledPolicy, request: Request[Any, Any, Any]) -> ApiKey | None:
    raise AssertionError(NOT_CALLED)


def _render(error: GatewayError) -> Response[bytes]:
    raise AssertionError(NOT_CALLED)


def test_the_operations_are_the_key_admin_routes() -> None:
    admin = KeyAdmin(KeyRegistry(FileKeyStore(None)))
    handlers = key_admin_routes(admin, _authenticate, _compiled, _render, decode_as)
    routes = {
        (re.sub(r"\{(\w+):\w+\}", r"{\1}", path), method.lower())
        for handler in handlers
        for path in handler.paths
        for method in handler.http_methods
    }
    assert routes == {(path, method) for path, item in KEY_PATHS.items() for method in item}


def test_every_schema_named_is_a_component_of_the_document() -> None:
    named = set(re.findall(r"#/components/schemas/(\w+)", json.dumps(KEY_PATHS)))
    assert named == {struct.__name__ for struct in KEY_STRUCTS} | {"ErrorEnvelope"}
    document = build_document()
    assert named <= set(document["components"]["schemas"])
    assert {path: document["paths"][path] for path in KEY_PATHS} == json.loads(json.dumps(KEY_PATHS))
