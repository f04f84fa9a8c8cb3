"""gateway/policy/yaml_document.py: a policy's YAML never hangs, crashes or misleads: a key given twice,
an alias inside itself, an alias bomb and a document nested past the parser are refused with a
message, and anchors within bounds still work."""

from __future__ import annotations

import pytest

from gateway.policy.schema import PolicyError
from gateway.policy.yaml_document import MAX_VALUES, read_document


def test_anchors_and_aliases_within_bounds_still_work() -> None:
    document = read_document("base: &b {weight: 2}\npools: {a: *b, c: *b}\n", "p.yaml")
    assert document["pools"]["a"] == document["pools"]["c"] == {"weight": 2}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pools: {}\naliases: {}\naliases: {x: y}\n", "found the key 'aliases' twice"),
        ("pools:\n  small: {}\n  small: {}\n", "found the key 'small' twice"),
        ("a: &a [*a]\npools: {}\n", "an alias refers to a value that holds it"),
        ("a: &a {b: *a}\n", "an alias refers to a value that holds it"),
        ("pools: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("pools: [\n", "invalid YAML"),
    ],
)
def test_what_plain_safe_load_lets_through_is_refused(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as refused:
        read_document(text, "p.yaml")
    assert str(refused.value).startswith("p.yaml: ") and message in str(refused.value)


def test_an_alias_bomb_is_refused_at_once() -> None:
    """Nine levels of ten aliases each: a billion values written out. Walking them took minutes."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    with pytest.raises(PolicyError, match=f"more than {MAX_VALUES:,} values"):
        read_document("\n".join(lines) + "\n", "p.yaml")
