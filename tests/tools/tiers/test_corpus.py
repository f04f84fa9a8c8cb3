"""The training corpus: labelled, grouped, weighted, and free of the evaluation set's prompts."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gateway.tiers.config import DEFAULT_TIERS
from tests.support.tier_corpus import SMALL_SOURCES
from tools.tiers.corpus import REQUEST_WEIGHT, LabelledPrompt, build_corpus, corpus_main
from tools.tiers.near_duplicates import near_duplicates_of
from tools.tiers.sources import read_source


def test_corpus_rows(small_corpus: list[LabelledPrompt]) -> None:
    assert {r.source for r in small_corpus} == set(SMALL_SOURCES)
    assert {r.tier for r in small_corpus} == set(DEFAULT_TIERS)
    assert len({r.prompt for r in small_corpus}) == len(small_corpus)
    assert sum(r.weight for r in small_corpus) == pytest.approx(len(small_corpus), rel=1e-3)


def test_evaluation_prompts_never_reach_training(small_corpus: list[LabelledPrompt]) -> None:
    # GSM8K holds a variant of an MT-Bench word problem: the corpus drops it.
    _rows, dropped = build_corpus(["gsm8k"])
    assert dropped["near_duplicates_of_evaluation"] >= 1
    mt_bench = [p.text for p in read_source("mt-bench")]
    assert not any(near_duplicates_of([r.prompt for r in small_corpus], mt_bench))


def test_request_labelled_rows_weigh_more() -> None:
    rows, _dropped = build_corpus(["ifeval"], exclude=[])
    by_basis = {r.basis: r.weight for r in rows}
    assert by_basis["request"] == pytest.approx(REQUEST_WEIGHT * by_basis["source"], rel=1e-3)


def test_corpus_command_writes_training_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools.tiers import corpus

    monkeypatch.setattr(corpus, "TRAIN_SOURCES", {n: None for n in SMALL_SOURCES})
    out = tmp_path / "tiers.jsonl"
    assert corpus_main(["-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "hellaswag" in printed and "dropped:" in printed
    rows = [msgspec.json.decode(line) for line in out.read_bytes().splitlines()]
    assert {"prompt", "tier", "group", "weight"} <= set(rows[0])
