"""Prompt lookup: the longest recent n-gram match, what follows it, and nothing when nothing matches."""

from __future__ import annotations

import pytest

from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence
from backends.engine.spec_decode.ngram import NgramProposer, propose_ngram


def test_proposes_what_followed_the_last_ngram() -> None:
    tokens = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3]
    assert propose_ngram(tokens, 3, 1, 4) == [4, 5, 9]


def test_prefers_the_longest_match_then_the_latest() -> None:
    # "3" alone last occurred before 7; "2 3" occurred before 4: the longer match wins
    tokens = [2, 3, 4, 0, 3, 7, 2, 3]
    assert propose_ngram(tokens, 2, 1, 2) == [4, 0]
    # two matches of the same length: the most recent one
    assert propose_ngram([5, 1, 5, 2, 5], 1, 1, 1) == [2]


def test_stops_at_the_end_of_the_tokens_and_at_k() -> None:
    assert propose_ngram([7, 8, 7], 5, 1, 3) == [8, 7]
    assert propose_ngram([1, 2, 3, 1, 2, 3, 1], 2, 1, 3) == [2, 3]


def test_nothing_when_nothing_matches() -> None:
    assert propose_ngram([1, 2, 3, 4], 3, 1, 4) == []
    assert propose_ngram([1], 3, 1, 4) == []
    assert propose_ngram([1, 2, 1, 2], 3, 3, 3) == []  # only n = 3 allowed, and "2 1 2" never occurred


def test_the_proposer_caps_each_request() -> None:
    proposer = NgramProposer(4, min_n=1, max_n=3)
    seqs = [
        Sequence(seq_id=i, request_id=str(i), token_ids=t, params=SamplingParams(), arrival=i)
        for i, t in enumerate([[1, 2, 3, 1, 2], [4, 5, 6]])
    ]
    assert proposer.propose([(seqs[0], 1), (seqs[1], 4)]) == [[3], []]
    assert proposer.proposal_probs(seqs[0]) is None


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        NgramProposer(4, min_n=3, max_n=2)
