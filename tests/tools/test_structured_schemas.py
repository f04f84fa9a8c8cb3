"""The shared schema set is valid JSON Schema, and ``bounded`` caps exactly its free-text strings."""

from __future__ import annotations

import jsonschema
import pytest

from tools.structured_schemas import SCHEMAS, bounded


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_schema_is_valid_json_schema(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMAS[name])
    jsonschema.Draft202012Validator.check_schema(bounded(SCHEMAS[name], 8))


def test_bounded_caps_free_text_strings_only() -> None:
    person = bounded(SCHEMAS["person"], 8)
    assert person["properties"]["name"] == {"type": "string", "minLength": 1, "maxLength": 8}
    assert "maxLength" not in person["properties"]["address"]["properties"]["zip"]  # a pattern
    assert "maxLength" not in person["properties"]["address"]["properties"]["country"]  # an enum
    assert person["properties"]["address"]["properties"]["street"]["maxLength"] == 8
    assert "maxLength" not in SCHEMAS["person"]["properties"]["name"]  # a copy: the set is untouched
    todo = bounded(SCHEMAS["todo_list"], 8)
    assert todo["properties"]["items"]["items"]["properties"]["task"]["maxLength"] == 8
