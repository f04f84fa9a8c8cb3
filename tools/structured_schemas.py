"""JSON Schemas shaped like real structured-output requests: what the tests and the structured-outputs
bench (``bench/structured_outputs.py``) run every constraint over.

Each one exercises a part of JSON Schema that a grammar has to get right: nested objects, arrays with
bounds, enums, required and optional fields, numbers with bounds, strings with a pattern or a format,
``anyOf``, ``$ref`` into ``$defs``. Free-text strings have no ``maxLength`` (OpenAI's strict mode takes
none, and xgrammar pays ~6 ms of compile time per unit of a bound over SmolLM2's vocabulary);
``bounded`` adds one, so a random-weight model under the mask finishes in a bounded number of tokens.
"""

from __future__ import annotations

import copy
import json
from typing import Any

__all__ = ["SCHEMAS", "bounded", "schema_text"]

_NAME = {"type": "string", "minLength": 1}

SCHEMAS: dict[str, dict[str, Any]] = {
    # a contact card: nested object, patterns, integer bounds, an optional field
    "person": {
        "type": "object",
        "properties": {
            "name": _NAME,
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "pattern": "^[a-z0-9.]{1,16}@[a-z]{1,12}\\.(com|org|fr)$"},
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                    "country": {"type": "string", "enum": ["US", "FR", "DE", "JP"]},
                },
                "required": ["street", "zip", "country"],
                "additionalProperties": False,
            },
            "nickname": _NAME,
        },
        "required": ["name", "age", "address"],
        "additionalProperties": False,
    },
    # classification with a confidence: enum, a bounded number, a bounded list of strings
    "sentiment": {
        "type": "object",
        "properties": {
            "label": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "keywords": {"type": "array", "items": _NAME, "maxItems": 4},
        },
        "required": ["label", "confidence", "keywords"],
        "additionalProperties": False,
    },
    # extraction of line items: $ref into $defs, arrays with minItems/maxItems, an exclusive bound
    "invoice": {
        "$defs": {
            "line": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                    "unit_price": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
                },
                "required": ["sku", "quantity", "unit_price"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {
            "invoice_id": {"type": "string", "format": "uuid"},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1, "maxItems": 3},
            "paid": {"type": "boolean"},
        },
        "required": ["invoice_id", "lines", "paid"],
        "additionalProperties": False,
    },
    # a tool's arguments: enum units, a nullable field by anyOf, a date
    "weather_query": {
        "type": "object",
        "properties": {
            "city": _NAME,
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "date": {"type": "string", "format": "date"},
            "days": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 14}, {"type": "null"}]},
        },
        "required": ["city", "unit", "date", "days"],
        "additionalProperties": False,
    },
    # a tagged union: anyOf of objects told apart by a const
    "shape": {
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "circle"},
                    "radius": {"type": "number", "minimum": 0, "maximum": 100},
                },
                "required": ["kind", "radius"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "rectangle"},
                    "width": {"type": "integer", "minimum": 0, "maximum": 100},
                    "height": {"type": "integer", "minimum": 0, "maximum": 100},
                },
                "required": ["kind", "width", "height"],
                "additionalProperties": False,
            },
        ]
    },
    # a plan: an array of nested objects with an enum status and a bounded list inside
    "todo_list": {
        "type": "object",
        "properties": {
            "title": _NAME,
            "items": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "task": _NAME,
                        "status": {"enum": ["todo", "doing", "done"]},
                        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
                    },
                    "required": ["task", "status", "priority"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["title", "items"],
        "additionalProperties": False,
    },
}
"""Name -> JSON Schema (draft 2020-12)."""


def schema_text(name: str) -> str:
    """The schema as the JSON text a request carries."""
    return json.dumps(SCHEMAS[name])


def bounded(schema: dict[str, Any], max_length: int) -> dict[str, Any]:
    """A copy of ``schema`` whose free-text strings (no pattern, format, enum or const) are at most
    ``max_length`` characters."""
    schema = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            is_free = node.get("type") == "string" and not {"pattern", "format", "enum", "const"} & set(node)
            if is_free:
                node["maxLength"] = min(node.get("maxLength", max_length), max_length)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return schema
