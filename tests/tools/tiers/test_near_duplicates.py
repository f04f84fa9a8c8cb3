"""Near-duplicates: edits and pasted copies are caught, different prompts are not."""

from __future__ import annotations

from tools.tiers.near_duplicates import group_near_duplicates, near_duplicates_of

BUS = (
    "Some people got on a bus at the terminal. At the first bus stop, half of the people got down "
    "and 4 more people got in. How many people got on the bus at the terminal?"
)


def test_an_edited_copy_is_a_near_duplicate() -> None:
    edited = BUS.replace("half of the people", "a third of the people").replace("4 more", "5 more")
    assert near_duplicates_of([edited, "Write a haiku about autumn leaves."], [BUS]) == [True, False]


def test_a_prompt_pasted_into_a_longer_one_is_a_near_duplicate() -> None:
    longer = "Answer in one word. " + BUS + " Show your working first, then the answer."
    assert near_duplicates_of([longer], [BUS]) == [True]


def test_grouping_is_transitive_and_stable() -> None:
    texts = [
        BUS,
        "Translate 'good morning' into Italian.",
        BUS.upper(),  # case is folded
        BUS + " Explain briefly.",
        "Translate 'good night' into Italian please, thanks a lot.",
    ]
    groups = group_near_duplicates(texts)
    assert groups[0] == groups[2] == groups[3] == 0
    assert groups[1] == 1 and groups[4] == 4


def test_scripts_other_than_latin() -> None:
    text = "请把这段话翻译成英文 今天天气很好 我们一起去公园散步吧"
    assert near_duplicates_of([text + "谢谢"], [text]) == [True]
    assert near_duplicates_of(["完全不同的一句话 讲的是数学证明"], [text]) == [False]
