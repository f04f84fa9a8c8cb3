"""A chat prompt's token ids, encoded a message at a time and remembered: a conversation's next turn
resends its whole history, and only the new messages need encoding.

A chat template writes special tokens (``<|im_start|>``, ``<|start_header_id|>``, ...) between the
messages. The ``tokenizers`` library cuts its input at added tokens before anything else (they are
matched on the raw text, and the text between two of them is normalized, pre-tokenized and encoded on
its own), so the prompt's token ids are those of each piece between special tokens, one after the
other. :class:`SegmentEncoder` cuts the rendered prompt at the special tokens, encodes each piece it
has not seen and keeps it in a bounded LRU: the history's pieces are found, the new turn's encoded.

That holds only where the tokenizer agrees: a special token that strips the whitespace beside it, is
matched after normalization or only as a whole word, or a pre-tokenizer that treats the input's start
differently (a prefix space added to the first piece only) would encode a piece alone otherwise than
within the prompt. So only special tokens matched as they are count as cuts, and
:meth:`SegmentEncoder.agrees` checks, on sample conversations rendered with the model's own template,
that the pieces give the whole prompt's ids; where they do not, the tokenizer encodes every prompt
whole, as before.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import tokenizers

__all__ = ["SegmentEncoder"]

_MAX_PIECE_CHARS = 200_000
"""Longer pieces are encoded every time, not kept (one document should not empty the cache)."""


class SegmentEncoder:
    """Encodes text piece by piece between special tokens, remembering at most ``max_chars`` of pieces."""

    def __init__(self, backend: tokenizers.Tokenizer, *, max_chars: int = 4_000_000) -> None:
        self.backend = backend
        self.max_chars = max_chars
        special = {
            token.content: token_id
            for token_id, token in backend.get_added_tokens_decoder().items()
            if token.special and not (token.lstrip or token.rstrip or token.single_word or token.normalized)
        }
        self._special = special
        longest_first = sorted(special, key=len, reverse=True)
        self._cut = re.compile("|".join(map(re.escape, longest_first))) if special else None
        self._pieces: OrderedDict[str, array[int]] = OrderedDict()
        """Each piece's ids, 4 bytes a token (a list would take 36)."""
        self._num_chars = 0
        self._lock = threading.Lock()  # long prompts are encoded in a thread
        self.num_hits = 0
        self.num_misses = 0

    def encode(
        self, text: str, max_tokens: int, cut_margin: int | None = None, *, in_thread: bool = False
    ) -> list[int]:
        """The first ``max_tokens`` ids of ``text``. ``cut_margin``: ``text`` is the head of a longer
        prompt, so its last piece keeps only the tokens ending this many characters before its end
        (a word cut in two encodes differently), and is not remembered. ``in_thread``: encode with
        ``encode_batch``, which lets go of the GIL (the event loop runs meanwhile)."""
        assert self._cut is not None
        ids: list[int] = []
        position = 0
        for match in self._cut.finditer(text):
            if match.start() > position:
                ids += self._piece(text[position : match.start()], in_thread)
            ids.append(self._special[match.group()])
            position = match.end()
            if len(ids) >= max_tokens:
                return ids[:max_tokens]
        if position < len(text):
            tail = text[position:]
            if cut_margin is None:
                ids += self._piece(tail, in_thread)
            else:
                encoding = self._encoding(tail, in_thread)
                limit = len(tail) - cut_margin
                ids += [i for i, (_, end) in zip(encoding.ids, encoding.offsets, strict=True) if end <= limit]
        return ids[:max_tokens]

    def new_chars(self, text: str) -> int:
        """How many of ``text``'s characters :meth:`encode` would have to encode (its pieces not kept)."""
        assert self._cut is not None
        pieces = self._pieces
        total = position = 0
        for match in self._cut.finditer(text):
            if match.start() > position and text[position : match.start()] not in pieces:
                total += match.start() - position
            position = match.end()
        if position < len(text) and text[position:] not in pieces:
            total += len(text) - position
        return total

    def _encoding(self, text: str, in_thread: bool) -> tokenizers.Encoding:
        if in_thread:
            return self.backend.encode_batch([text], add_special_tokens=False)[0]
        return self.backend.encode(text, add_special_tokens=False)

    def _piece(self, piece: str, in_thread: bool = False) -> array[int] | list[int]:
        with self._lock:
            kept = self._pieces.get(piece)
            if kept is not None:
                self._pieces.move_to_end(piece)
                self.num_hits += 1
                return kept
            self.num_misses += 1
        ids: list[int] = self._encoding(piece, in_thread).ids
        if len(piece) <= _MAX_PIECE_CHARS:
            with self._lock:
                if piece not in self._pieces:
                    self._pieces[piece] = array("I", ids)
                    self._num_chars += len(piece)
                    while self._num_chars > self.max_chars:
                        old, _ = self._pieces.popitem(last=False)
                        self._num_chars -= len(old)
        return ids

    def agrees(self, prompts: Sequence[str]) -> bool:
        """Whether cutting gives the whole prompt's ids for every one of ``prompts``."""
        if self._cut is None:
            return False
        for prompt in prompts:
            whole = self.backend.encode(prompt, add_special_tokens=False).ids
            if self.encode(prompt, len(whole) + 1) != whole:
                return False
        with self._lock:  # the samples are not worth keeping
            self._pieces.clear()
            self._num_chars = self.num_hits = self.num_misses = 0
        return True
