"""Incremental detokenization and the stop-string check (the scheduler's own stop tests, in
test_scheduler.py, run them through ``Scheduler.postprocess``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.engine.detokenizer import IncrementalDetokenizer, append_text, find_stop_string
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence
from backends.engine.tokenizer import Tokenizer


@pytest.fixture
def tokenizer(tiny_dirs: dict[str, Path]) -> Tokenizer:
    return Tokenizer.from_hf_dir(tiny_dirs["gqa"])


def test_incremental_detokenizer_never_splits_utf8(tokenizer: Tokenizer) -> None:
    text = "héllo 東京 🚀!"
    ids = tokenizer.encode(text)  # one token per byte: multi-byte characters span tokens
    detok = IncrementalDetokenizer(tokenizer, 0)
    pieces = [detok.step(ids[: i + 1]) for i in range(len(ids))]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)


def test_a_stop_string_is_found_only_where_the_new_text_completes_it() -> None:
    assert find_stop_string("abc yz", "z", ["yz"]) == (4, "yz")
    assert find_stop_string("abc yz", "z", ["q", "yz", " yz"]) == (3, " yz")  # the earliest of several
    assert find_stop_string("yz abc", "c", ["yz"]) is None  # complete before the new text: not looked at
    assert find_stop_string("abc yz", "", ["yz"]) is None  # no new text
    assert find_stop_string("abc yz", "z", []) is None


def test_of_stop_strings_that_start_together_the_first_listed_is_named() -> None:
    """One token can complete both; the text is cut at the same place either way, and the client is
    told the one it listed first."""
    assert find_stop_string("a Paris", "Paris", ["Paris", "Par"]) == (2, "Paris")
    assert find_stop_string("a Paris", "Paris", ["Par", "Paris"]) == (2, "Par")


class CharDetokenizer:
    """Each token's text is the character of its id."""

    def step(self, token_ids: list[int]) -> str:
        return chr(token_ids[-1])


def test_append_text_grows_the_text_and_cuts_it_before_a_stop_string() -> None:
    seq = Sequence(
        seq_id=0, request_id="r", token_ids=[ord("a")], params=SamplingParams(stop=["xy"]), arrival=0
    )
    seq.detokenizer = CharDetokenizer()
    seq.token_ids.append(ord("x"))
    assert append_text(seq, find_stop=True) is None and seq.text == "x"
    seq.token_ids.append(ord("y"))
    assert append_text(seq, find_stop=False) is None and seq.text == "xy"  # not looked for
    seq.text = "x"
    assert append_text(seq, find_stop=True) == "xy" and seq.text == ""  # it names the one it cut at
