"""A sequence's text as its tokens arrive: incremental detokenization, and the request's stop strings.

``IncrementalDetokenizer`` (one per sequence, ``Sequence.detokenizer``) turns the growing token list into
text deltas; ``append_text`` adds the newest delta to ``Sequence.text`` and, when asked, looks for the
request's stop strings in it, cutting the text before the first one found and naming it (the scheduler
keeps it as ``Sequence.stop_reason``, which the server reports as vLLM does). The scheduler calls it for
every token it appends; whether a sequence stops on a token (eos, stop ids, lengths) stays its own call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.engine.sequence import Sequence
    from backends.engine.tokenizer import Tokenizer


class IncrementalDetokenizer:
    """Turns a growing token list into text deltas that never split a UTF-8 character.

    It decodes a short window before the newest tokens (so spacing and merges come out as in a full
    decode) and holds text back while it ends in the replacement character of a partial byte sequence.
    """

    CONTEXT_TOKENS = 6

    def __init__(self, tokenizer: Tokenizer, num_prompt_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.prefix_offset = max(num_prompt_tokens - self.CONTEXT_TOKENS, 0)
        self.read_offset = num_prompt_tokens

    def step(self, token_ids: list[int]) -> str:
        """The new text since the last call, given every token id (prompt included)."""
        decode = self.tokenizer.decode
        prefix_text = decode(token_ids[self.prefix_offset : self.read_offset])
        full_text = decode(token_ids[self.prefix_offset :])
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(token_ids)
            return full_text[len(prefix_text) :]
        return ""


def append_text(seq: Sequence, *, find_stop: bool) -> str | None:
    """Add the text of ``seq``'s newest token (``seq.detokenizer``'s delta) to ``seq.text``. With
    ``find_stop``: the stop string that text completed, if any (a client is told which one ended the
    text), and ``seq.text`` then ends before it; None otherwise."""
    new_text = seq.detokenizer.step(seq.token_ids)
    seq.text += new_text
    if not find_stop:
        return None
    found = find_stop_string(seq.text, new_text, seq.params.stop)
    if found is None:
        return None
    cut, stop = found
    seq.text = seq.text[:cut]
    return stop


def find_stop_string(text: str, new_text: str, stop: list[str]) -> tuple[int, str] | None:
    """Where in ``text`` the earliest of ``stop`` starts, and which one it is (the first listed of those
    starting there), when ``new_text`` (the tail of ``text`` just added) completed one; None otherwise.
    Only the tail a new match can reach is searched."""
    if not stop or not new_text:
        return None
    window = len(new_text) + max(len(s) for s in stop) - 1
    start = max(0, len(text) - window)
    hits = [(i, s) for s in stop if (i := text.find(s, start)) >= 0]
    return min(hits, key=_position) if hits else None


def _position(hit: tuple[int, str]) -> int:
    """A hit's start: ``min`` on it alone keeps the first listed of stop strings that start together."""
    return hit[0]
