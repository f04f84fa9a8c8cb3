"""``StructuredOutput``: what one request's output must match (exactly one field is set)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StructuredOutput"]


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """The constraint on a request's output; hashable, so a compiled grammar is cached by it."""

    json_schema: str | None = None
    """A JSON Schema, as JSON text: the output is one JSON value that validates against it."""
    json_object: bool = False
    """Any JSON object (``response_format: {"type": "json_object"}``)."""
    regex: str | None = None
    """The whole output matches this regular expression."""
    choice: tuple[str, ...] | None = None
    """The output is exactly one of these strings."""
    grammar: str | None = None
    """An EBNF grammar in xgrammar's dialect (GBNF-like; its ``root`` rule is the output)."""
    structural_tag: str | None = None
    """xgrammar's structural tag, as JSON text: free text in which each tagged region (a tool call)
    must match its own schema; what forced and ``auto`` tool calls use."""

    def __post_init__(self) -> None:
        given = [
            self.json_schema is not None,
            self.json_object,
            self.regex is not None,
            self.choice is not None,
            self.grammar is not None,
            self.structural_tag is not None,
        ]
        if sum(given) != 1:
            raise ValueError("a StructuredOutput sets exactly one constraint")
