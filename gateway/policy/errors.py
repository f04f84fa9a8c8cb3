"""A msgspec validation error as a policy error that names its path with the file's own keys.

msgspec names a field ``.name`` and a list item ``[0]``, but a mapping's key only ``[...]``
(``$.kv_routing.pools[...].load_tokens``), and a bad key itself ``- at `key` in `$.pools```. A policy
is mostly mappings keyed by names the operator chose (pools, tenants, replica labels, regions), so each
``[...]`` is resolved by converting the document again with that mapping cut down to one key at a
time: the key whose value alone raises the same error is the one at fault. Errors are rare and
policies small, so the extra conversions cost nothing that matters, and every section's types are
covered without a walker per type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

__all__ = ["describe"]

Convert = Callable[[Any], object]
"""Converts a whole document, raising ``msgspec.ValidationError`` as the loader's conversion does."""

_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_ANY = "[...]"
_FIELD = re.compile(r"([a-z_][a-z0-9_]*): ")


def describe(error: msgspec.ValidationError, document: Any, convert: Convert) -> str:
    """``error`` as ``path: what``, the path dotted with the document's keys
    (``kv_routing.pools.chat.load_tokens: expected `float` >= 0.0``)."""
    message = str(error)
    what, at, where = message.rpartition(" - at `")
    if not at:
        return _lower(message)
    is_key = where.startswith("key` in `")
    path = where.removeprefix("key` in `").rstrip("`").removeprefix("$")
    steps = _steps(path)
    if steps is None:
        return f"{path.lstrip('.')}: {_lower(what)}"
    names: list[str] = []
    trail: list[Any] = []
    node = document
    for step in steps:
        if step == _ANY:
            key = _culprit(document, trail, node, convert, message)
            if key is None:
                names.append(_ANY)
                break
            document = _replace(document, trail, {key: node[key]})
            step = key
        names.append(f"[{step}]" if isinstance(step, int) and not isinstance(step, bool) else f".{step}")
        trail.append(step)
        node = _child(node, step)
    field = _FIELD.match(what)
    if field is not None and names and not is_key:  # a check of the struct's own names its field
        names.append(f".{field.group(1)}")
        what = what[field.end() :]
    dotted = "".join(names).lstrip(".")
    if is_key:
        key = _culprit(document, trail, node, convert, message) if node is not None else None
        if key is not None:
            return f"{dotted}: key {key!r}: {_lower(what)}"
    return f"{dotted}: {_lower(what)}" if dotted else _lower(what)


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:]


def _steps(path: str) -> list[Any] | None:
    """``.pools[...].replicas[0]`` -> ``['pools', '[...]', 'replicas', 0]``; None if it is not a path."""
    steps: list[Any] = []
    end = 0
    for match in _STEP.finditer(path):
        if match.start() != end:
            return None
        end = match.end()
        field, index = match.groups()
        steps.append(field if field is not None else (_ANY if index == "..." else int(index)))
    return steps if end == len(path) else None


def _child(node: Any, step: Any) -> Any:
    if isinstance(node, Mapping):
        return node.get(step)
    if isinstance(node, Sequence) and not isinstance(node, str) and isinstance(step, int):
        return node[step] if -len(node) <= step < len(node) else None
    return None


def _culprit(document: Any, trail: list[Any], node: Any, convert: Convert, message: str) -> Any:
    """The key of mapping ``node`` (at ``trail`` in ``document``) whose entry alone raises ``message``."""
    if not isinstance(node, Mapping):
        return None
    for key, value in node.items():
        try:
            convert(_replace(document, trail, {key: value}))
        except msgspec.ValidationError as e:
            if str(e) == message:
                return key
        except (TypeError, ValueError):
            continue
    return None


def _replace(document: Any, trail: Sequence[Any], value: Any) -> Any:
    """A copy of ``document`` with the node at ``trail`` replaced by ``value`` (the rest shared)."""
    if not trail:
        return value
    head, rest = trail[0], trail[1:]
    if isinstance(document, Mapping):
        return {**document, head: _replace(document[head], rest, value)}
    copy = list(document)
    copy[head] = _replace(copy[head], rest, value)
    return copy
