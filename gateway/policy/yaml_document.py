"""A policy file's YAML, read so that no file can hang, crash or quietly mislead the gateway.

Plain ``yaml.safe_load`` lets three things through that a policy must not carry:

- **a key given twice** in one mapping (two ``small:`` pools, two ``aliases:``): the last one silently
  wins, so what the file seems to say is not what is served. It is refused, naming the line;
- **an alias inside itself** (``a: &a [*a]``): the document is a cycle, and every walk over it (the
  checks, the merge, the conversion) recursed until Python gave up, so ``policy check`` and ``serve``
  died with a traceback and a hot reload ended the file watcher without a word;
- **an alias bomb** ("billion laughs": ten aliases of ten aliases of ...): a few hundred bytes that
  expand to billions of values, which the checks walked for minutes, freezing a serving gateway's
  event loop on reload. A document that expands to more than ``MAX_VALUES`` values is refused.

Anchors and aliases that stay within those bounds (``&defaults`` merged into several pools) still work.
A document nested deeper than the YAML parser itself can follow is refused too, not raised.
"""

from __future__ import annotations

from typing import Any

import yaml

from gateway.policy.schema import PolicyError

__all__ = ["MAX_VALUES", "read_document"]

MAX_VALUES = 200_000
"""The most values (mappings, lists and scalars, aliases expanded) a policy may hold: thousands of
keys and replicas fit, an alias bomb does not."""


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                is_repeat = key in seen
            except TypeError:  # a complex key: the conversion refuses it later
                continue
            if is_repeat:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice (the last one would silently win)",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_document(text: str, source: str) -> Any:
    """The YAML document of ``text``; PolicyError, naming ``source``, for invalid YAML, a key given twice,
    a document nested too deeply, an alias inside itself, or one that expands past ``MAX_VALUES``."""
    try:
        document = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        raise PolicyError(f"{source}: invalid YAML: {e}") from None
    except RecursionError:
        raise PolicyError(f"{source}: invalid YAML: nested too deeply") from None
    _check_size(document, source)
    return document


def _check_size(root: Any, source: str) -> None:
    """Walks the document once per distinct mapping or list (iteratively: no depth limit), counting its
    values as if every alias were written out."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, is_done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if is_done:
            on_path.discard(key)
            size = 1 + sum(sizes[id(c)] if isinstance(c, dict | list) else 1 for c in children)
            if size > MAX_VALUES:
                raise PolicyError(
                    f"{source}: the document expands to more than {MAX_VALUES:,} values "
                    "(an alias repeated inside aliases?)"
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if isinstance(child, dict | list):
                if id(child) in on_path:
                    raise PolicyError(f"{source}: invalid YAML: an alias refers to a value that holds it")
                stack.append((child, False))
