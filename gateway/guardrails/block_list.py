"""Words or phrases a policy forbids, matched whole-word and case-insensitively.

Each entry is first looked for in the lower-cased text with ``in`` (a C substring search); only an
entry that is there is matched with its whole-word pattern for its span. An alternation of all the
entries would be tried at every position of the text, and be a hundred times slower.
"""

from __future__ import annotations

import re

from gateway.guardrails.findings import Finding


def _pattern(entry: str) -> re.Pattern[str]:
    words = [re.escape(word) for word in entry.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)", re.IGNORECASE)


class BlockList:
    """Finds the entries of one block list (kind ``block_list``)."""

    def __init__(self, words: tuple[str, ...]) -> None:
        entries = dict.fromkeys(" ".join(word.lower().split()) for word in words if word.strip())
        self.entries = tuple((entry.split()[0], _pattern(entry)) for entry in entries)
        """(the entry's first word, for the cheap test; its pattern)"""

    def find(self, text: str) -> list[Finding]:
        lowered: str | None = None
        found: list[Finding] = []
        for first, pattern in self.entries:
            if lowered is None:
                lowered = text.lower()
            if first in lowered:
                found.extend(Finding("block_list", m.start(), m.end()) for m in pattern.finditer(text))
        return found


__all__ = ["BlockList"]
