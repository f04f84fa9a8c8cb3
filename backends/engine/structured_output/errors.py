"""``GrammarError``: a structured-output request whose schema, regex or grammar cannot be compiled."""

from __future__ import annotations

__all__ = ["GrammarError"]


class GrammarError(ValueError):
    """The constraint a request asked for is invalid (a bad JSON Schema, regex, EBNF grammar or
    structural tag); raised at admission, before the request holds any engine state. ``kind`` names
    the ``StructuredOutput`` field, so a server can name the request parameter it came from."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
