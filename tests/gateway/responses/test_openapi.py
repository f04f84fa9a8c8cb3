"""gateway/responses/openapi.py: the stored responses' routes in the OpenAPI document."""

from __future__ import annotations

from gateway.openapi import build_document


def test_the_document_has_the_stored_responses_routes() -> None:
    document = build_document()
    paths = document["paths"]
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}
    assert set(paths["/v1/responses/{response_id}/input_items"]) == {"get"}
    schemas = document["components"]["schemas"]
    assert {"InputItemList", "DeletedResponse", "ResponseObject"} <= set(schemas)
    listed = paths["/v1/responses/{response_id}/input_items"]["get"]
    assert [p["name"] for p in listed["parameters"]] == ["response_id", "limit", "order", "after"]
