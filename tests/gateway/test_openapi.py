"""gateway/openapi.py: the served document is true to the routes and to the validation it describes."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jsonschema_rs
import pytest
import schemathesis
from schemathesis.core.result import Ok

from gateway.app import create_app
from gateway.errors import InvalidRequest
from gateway.openapi import OPENAPI_PATH, build_document
from gateway.pipeline import Endpoint
from gateway.proxy import ROUTES, ProxyApp
from gateway.replicas.pools import is_gateway_path
from gateway.schemas import parse_body
from gateway.settings import Settings
from tests.reliability.test_validation_contract import CAPABILITIES, CONTRACT, Row
from tools.servers.gateway_server import fake_policy, write_policy

_REQUEST_SCHEMA = {
    Endpoint.CHAT: "ChatRequest",
    Endpoint.COMPLETIONS: "CompletionRequest",
    Endpoint.EMBEDDINGS: "EmbeddingRequest",
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> ProxyApp:
    path = write_policy(
        tmp_path_factory.mktemp("openapi") / "policy.yaml", fake_policy("http://127.0.0.1:9/v1")
    )
    return create_app(Settings(policy_path=str(path)))


def real_routes(app: ProxyApp) -> set[tuple[str, str]]:
    """(path, method) of every route: the Litestar handlers plus the proxied endpoints."""
    routes = {(path, "POST") for path in (*ROUTES, *app.exchanges)}
    for path, handlers in app.litestar.route_handler_method_map.items():
        for method in handlers:
            if method != "OPTIONS":  # Litestar answers OPTIONS on every route itself (CORS preflight)
                routes.add((re.sub(r"\{(\w+):\w+\}", r"{\1}", path), method))  # {model_id:path} -> {model_id}
    return routes


def documented_routes() -> set[tuple[str, str]]:
    return {(path, method.upper()) for path, item in build_document()["paths"].items() for method in item}


def test_document_paths_and_methods_are_the_real_routes(app: ProxyApp) -> None:
    assert documented_routes() == real_routes(app)


async def test_the_document_is_served_as_built(app: ProxyApp) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get(OPENAPI_PATH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == json.loads(json.dumps(build_document()))


def test_the_document_is_openapi_that_schemathesis_reads() -> None:
    operations = set()
    for result in schemathesis.openapi.from_dict(build_document()).get_all_operations():
        assert isinstance(result, Ok), result  # an Err: an operation schemathesis cannot read
        operations.add((result.ok().path, result.ok().method.upper()))
    assert operations == documented_routes()


def _endpoint(row: Row) -> Endpoint:
    return ROUTES[row.endpoint]


def _gateway_accepts(row: Row) -> bool:
    try:
        parse_body(_endpoint(row), json.dumps(row.body()).encode())
    except InvalidRequest:
        return False
    return True


@pytest.fixture(scope="module")
def validators() -> dict[Endpoint, Any]:
    document = build_document()
    return {
        endpoint: jsonschema_rs.validator_for(
            {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
        )
        for endpoint, name in _REQUEST_SCHEMA.items()
    }


@pytest.mark.parametrize("row", CONTRACT + CAPABILITIES, ids=lambda row: row.id)
def test_request_schemas_accept_what_the_gateway_accepts(validators: dict[Endpoint, Any], row: Row) -> None:
    # every row of the validation contract: the document and the gateway give the same verdict
    assert validators[_endpoint(row)].is_valid(row.body()) == _gateway_accepts(row)


def test_no_passthrough_route_can_take_a_route_of_the_gateways_own(app: ProxyApp) -> None:
    # a pool's passthrough_routes are refused when the gateway serves the path (gateway.replicas.pools)
    assert [path for path, _ in real_routes(app) if not is_gateway_path(path)] == []
