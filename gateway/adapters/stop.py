"""Where a completion ends at its stop strings: ``cut_at_stop`` for a text, ``StopScanner`` for a stream.

OpenAI's contract: the text ends right before the first stop string, which is not returned. A native
API that returns the stop string (TensorRT-LLM's ``stop_words`` keep the stop word's tokens, TGI keeps
its stop sequence) or runs past it is trimmed here. "First" is the stop string that is complete first
as the text grows (the one generation would have stopped at), the earliest start breaking ties. A
stream holds back the tail that could still begin a stop string until the next piece says whether it
does.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["StopScanner", "cut_at_stop", "stop_strings"]


def stop_strings(stop: object) -> tuple[str, ...] | None:
    """OpenAI's ``stop`` (a string, a list of strings or None) as a tuple of non-empty strings; None
    when it is neither (the caller refuses it)."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return tuple(s for s in stop if s)
    return None


def _first_stop(text: str, stops: Iterable[str]) -> int:
    """Where the first stop string to complete starts in ``text``; -1 when none occurs."""
    best: tuple[int, int] | None = None
    for stop in stops:
        start = text.find(stop)
        if start != -1:
            key = (start + len(stop), start)
            if best is None or key < best:
                best = key
    return -1 if best is None else best[1]


def cut_at_stop(text: str, stops: Iterable[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether one occurred."""
    at = _first_stop(text, stops)
    return (text, False) if at == -1 else (text[:at], True)


class StopScanner:
    """Stop strings over a stream of text pieces: ``feed`` returns what may be sent now."""

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False
        """A stop string occurred: everything after it is dropped."""

    def feed(self, piece: str) -> str:
        """The text that is certain to come before any stop string, now that ``piece`` arrived."""
        if self.stopped:
            return ""
        text = self._held + piece
        if not self._stops:
            self._held = ""
            return text
        at = _first_stop(text, self._stops)
        if at != -1:
            self.stopped = True
            self._held = ""
            return text[:at]
        keep = self._partial_tail(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, once the stream ended without completing a stop string."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_tail(self, text: str) -> int:
        """The length of the longest end of ``text`` that begins some stop string."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
