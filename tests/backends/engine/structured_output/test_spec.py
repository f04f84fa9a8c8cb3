"""``StructuredOutput``: exactly one constraint, hashable (compiled grammars are cached by it)."""

from __future__ import annotations

import pytest

from backends.engine.structured_output import StructuredOutput


def test_one_constraint_and_hashable() -> None:
    a = StructuredOutput(json_schema='{"type": "object"}')
    assert a == StructuredOutput(json_schema='{"type": "object"}')
    assert (
        len({a, StructuredOutput(json_schema='{"type": "object"}'), StructuredOutput(json_object=True)}) == 2
    )
    assert StructuredOutput(choice=("yes", "no")).choice == ("yes", "no")


@pytest.mark.parametrize(
    "fields",
    [{}, {"json_object": True, "regex": "a+"}, {"grammar": 'root ::= "a"', "choice": ("a",)}],
)
def test_none_or_two_constraints_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutput(**fields)  # type: ignore[arg-type]
