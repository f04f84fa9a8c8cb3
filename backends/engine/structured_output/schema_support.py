"""``unenforced_keyword``: the first JSON Schema keyword xgrammar would silently drop, so it is refused.

xgrammar (0.2.9) turns a schema into a grammar, but some keywords it only logs and ignores, and some
combinations it reads one side of: a model masked by that grammar can write JSON that violates the
schema and still finish with ``stop``. The engine promises output that matches by construction, so such
a schema is refused up front (a 400, as vLLM's xgrammar backend does) instead of answered unchecked.
Each rule below was measured against the installed xgrammar: a violating document its grammar accepts
(``tests/backends/engine/structured_output/test_schema_support.py`` holds one per rule). Annotations
(``title``, ``description``, ``examples``, ``default``, ``$comment``, ...) and keywords this module does
not know constrain nothing and pass. The walk is iterative over every subschema (``$defs`` included,
``$ref`` never followed), so a deep or self-referencing schema costs its size, and a schema over
``MAX_NODES`` subschemas is refused rather than walked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_NODES", "UnsupportedSchemaError", "check_enforceable", "unenforced_keyword"]

MAX_NODES = 100_000
"""Most subschemas walked: past it a schema is refused (no request needs that many)."""

_NEVER_ENFORCED = {
    "not": "negation is not expressible",
    "if": "conditional subschemas (`then`, `else`) are ignored",
    "dependentRequired": "dependencies between properties are ignored",
    "dependentSchemas": "dependencies between properties are ignored",
    "dependencies": "dependencies between properties are ignored",
    "contains": "array membership is ignored",
}
"""Keywords whose violations xgrammar's grammar accepts wherever they appear."""
_UNCHECKED_FORMATS = frozenset({"idn-email", "idn-hostname", "iri", "iri-reference", "regex"})
"""Formats JSON Schema defines but xgrammar accepts any string for (formats it does not know, such as
OpenAPI's ``int32`` or ``password``, are annotations: a validator ignores them too)."""
_CHECKED_FORMATS = frozenset(
    {
        "email", "date-time", "date", "time", "duration", "uuid", "ipv4", "ipv6", "hostname", "uri",
        "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
    }
)  # fmt: skip
"""Formats xgrammar writes a grammar for; that grammar then replaces ``pattern`` and the lengths."""
_CHOICE_KEYS = ("const", "enum", "$ref", "anyOf", "oneOf", "allOf")
"""Keywords xgrammar reads instead of the rest of their schema: any sibling constraint is dropped."""
_NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format"})
_OBJECT_KEYS = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties", "propertyNames"}
    | {"minProperties", "maxProperties", "unevaluatedProperties"}
)
_ARRAY_KEYS = frozenset({"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "unevaluatedItems"})
_CONSTRAINTS = (
    _NUMBER_KEYS | _STRING_KEYS | _OBJECT_KEYS | _ARRAY_KEYS | set(_NEVER_ENFORCED) | set(_CHOICE_KEYS)
) | {"type", "additionalItems", "minContains", "maxContains"}
"""The validation keywords: everything else in a schema object is an annotation or unknown."""
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUBSCHEMAS = ("additionalProperties", "unevaluatedProperties", "propertyNames", "items", "contains")
_SUBSCHEMAS_MORE = ("additionalItems", "unevaluatedItems", "not", "if", "then", "else")


_Path = tuple[Any, str] | None
"""Where a subschema is: (its parent's path, the key or index that leads to it); None at the root."""


class UnsupportedSchemaError(ValueError):
    """A valid JSON Schema the grammar cannot enforce; the message names the keyword and where."""


def check_enforceable(schema: Any) -> None:
    """Raise ``UnsupportedSchemaError`` when xgrammar would ignore part of ``schema``."""
    problem = unenforced_keyword(schema)
    if problem is not None:
        raise UnsupportedSchemaError(problem)


def unenforced_keyword(schema: Any) -> str | None:
    """What xgrammar would drop from ``schema`` (the first found), in words; None when it all holds."""
    for count, (node, where, names_keys) in enumerate(_subschemas(schema)):
        if count >= MAX_NODES:
            return f"the schema has over {MAX_NODES} subschemas; too large to check"
        problem = _node_problem(node, names_keys)
        if problem is not None:
            return f"{problem} (at {_shorten(_pointer(where))})"
    return None


def _subschemas(schema: Any) -> Iterator[tuple[dict[str, Any], _Path, bool]]:
    """Every schema object in ``schema`` with its path (a linked list, made a JSON pointer only for
    the one reported: a deep schema costs its size, not its size times its depth) and whether it is a
    ``propertyNames`` (whose instances are strings); depth first, without recursion."""
    stack: list[tuple[Any, _Path, bool]] = [(schema, None, False)]
    while stack:
        node, path, names_keys = stack.pop()
        if not isinstance(node, dict):
            continue
        yield node, path, names_keys
        for key in _SUBSCHEMA_MAPS:
            children = node.get(key)
            if isinstance(children, dict):
                stack.extend((child, ((path, key), name), False) for name, child in children.items())
        for key in _SUBSCHEMA_LISTS:
            children = node.get(key)
            if isinstance(children, list):
                stack.extend((child, ((path, key), str(i)), False) for i, child in enumerate(children))
        for key in (*_SUBSCHEMAS, *_SUBSCHEMAS_MORE):
            stack.append((node.get(key), (path, key), key == "propertyNames"))


def _pointer(path: _Path) -> str:
    parts: list[str] = []
    while path is not None:
        path, part = path
        parts.append(str(part).replace("~", "~0").replace("/", "~1"))
    return "#/" + "/".join(reversed(parts)) if parts else "#"


def _shorten(pointer: str) -> str:
    return pointer if len(pointer) <= 120 else f"{pointer[:60]}...{pointer[-57:]}"


def _node_problem(node: dict[str, Any], names_keys: bool) -> str | None:
    """The first unenforced keyword of one schema object (its subschemas are walked on their own)."""
    for key, why in _NEVER_ENFORCED.items():
        if key in node:
            return f"`{key}` is not enforced: {why}"
    if node.get("uniqueItems") is True:
        return "`uniqueItems` is not enforced: repeated items are not prevented"
    if isinstance(node.get("format"), str) and node["format"] in _UNCHECKED_FORMATS:
        return f"`format: {node['format']}` is not enforced: the format is not checked"
    return _choice_problem(node) or _typed_problem(node, {"string"} if names_keys else None)


def _choice_problem(node: dict[str, Any]) -> str | None:
    """``const``, ``enum``, ``$ref`` and the combinators are read alone: a sibling constraint (beyond a
    ``type`` every listed value already has) would be dropped, and so would all but one ``allOf``."""
    choices = [key for key in _CHOICE_KEYS if key in node]
    if not choices:
        return None
    allowed = {"type"} if choices[0] in ("const", "enum") else set()
    siblings = sorted(key for key in node if key in _CONSTRAINTS and key != choices[0] and key not in allowed)
    if siblings:
        return f"`{siblings[0]}` beside `{choices[0]}` is not enforced: only `{choices[0]}` is read"
    if "type" in node and not _values_have_type(node, choices[0]):
        return f"`{choices[0]}` holds a value that is not of its `type`"
    if choices[0] == "allOf" and isinstance(node["allOf"], list) and len(node["allOf"]) > 1:
        return "`allOf` with more than one schema is not enforced: the schemas are not intersected"
    return None


def _typed_problem(node: dict[str, Any], implied: set[str] | None) -> str | None:
    """Constraints xgrammar reads only under a ``type`` it generates (``implied``: a key's schema is a
    string's), or only one at a time."""
    types = _types(node) or implied
    if types is None:  # untyped: xgrammar infers an object from properties, an array from items
        inferred = _NUMBER_KEYS | _STRING_KEYS
        inferred |= _OBJECT_KEYS if "properties" not in node else set()
        inferred |= _ARRAY_KEYS if "items" not in node and "prefixItems" not in node else set()
        untyped = sorted(key for key in node if key in inferred and (key != "format" or _checked(node)))
        if untyped:
            return f"`{untyped[0]}` without a `type` is not enforced: it is not applied"
    if "multipleOf" in node:
        problem = _multiple_of_problem(node, types or set())
        if problem is not None:
            return problem
    if _checked(node):
        beside = sorted(key for key in ("pattern", "minLength", "maxLength") if key in node)
        if beside:
            return f"`{beside[0]}` beside `format` is not enforced: only the format is read"
    if "pattern" in node and ("minLength" in node or "maxLength" in node):
        return "`minLength`/`maxLength` beside `pattern` is not enforced: only the pattern is read"
    properties = node.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = node.get("required")
    required = required if isinstance(required, list) else []
    undeclared = [name for name in required if isinstance(name, str) and name not in properties]
    if undeclared:
        return f"`required` {undeclared[0]!r} outside `properties` is not enforced: it is not required"
    if "propertyNames" in node and properties:
        return "`propertyNames` beside `properties` is not enforced: declared names are not checked"
    return None


def _multiple_of_problem(node: dict[str, Any], types: set[str]) -> str | None:
    """xgrammar enforces ``multipleOf`` on integers only: a whole step, no range beside it."""
    step = node["multipleOf"]
    if "number" in types or "integer" not in types:
        return "`multipleOf` on a non-integer type is not enforced: it is ignored"
    if not _is_whole(step):
        return "`multipleOf` with a fractional step is not enforced: it is ignored"
    ranged = sorted(_NUMBER_KEYS & set(node) - {"multipleOf"})
    if ranged:
        return f"`multipleOf` beside `{ranged[0]}` is not enforced: the step is ignored"
    return None


def _types(node: dict[str, Any]) -> set[str] | None:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {t for t in kind if isinstance(t, str)}
    return None


def _values_have_type(node: dict[str, Any], choice: str) -> bool:
    values = [node["const"]] if choice == "const" else node.get("enum")
    types = _types(node)
    if not isinstance(values, list) or not types:
        return True  # a malformed enum or type is xgrammar's to refuse
    return all(any(_has_type(value, t) for t in types) for value in values)


def _has_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return _is_whole(value)
    python = {"null": type(None), "boolean": bool, "string": str, "array": list, "object": dict}
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return kind in python and isinstance(value, python[kind])


def _is_whole(value: Any) -> bool:
    """A JSON integer: an int (not a bool) or a finite float with no fraction (``7.0``)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _checked(node: dict[str, Any]) -> bool:
    """The node's ``format`` is one xgrammar writes a grammar for."""
    return isinstance(node.get("format"), str) and node["format"] in _CHECKED_FORMATS
