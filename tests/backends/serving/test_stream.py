"""What a stream may send of a choice's cumulative output, and the usage it ends with."""

from __future__ import annotations

from backends.engine.outputs import CompletionOutput, RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.stream import DeltaCursor, stop_holdback_chars, usage_of


def running(text: str, num_tokens: int = 1) -> CompletionOutput:
    return CompletionOutput(0, text, list(range(num_tokens)), None, None)


def test_running_text_holds_back_what_a_stop_string_may_undo() -> None:
    holdback = stop_holdback_chars(SamplingParams(stop=["END", "x"]))
    assert holdback == 2 and stop_holdback_chars(SamplingParams()) == 0
    cursor = DeltaCursor()
    assert cursor.take_text(running("Hello"), holdback) == "Hel"
    assert cursor.take_text(running("Hello E"), holdback) == "lo"
    finished = CompletionOutput(0, "Hello ", [1, 2], "stop", None)
    assert cursor.take_text(finished, holdback) == " "  # once finished, everything left goes


def test_a_split_character_waits_for_its_last_byte() -> None:
    cursor = DeltaCursor()
    assert cursor.take_text(running("ab\ufffd"), 0) == "ab"
    assert cursor.take_text(running("ab\u00e9"), 0) == "\u00e9"


def test_take_tokens_marks_them_sent() -> None:
    cursor = DeltaCursor()
    assert cursor.take_tokens(running("a", 3)) == (0, 3)
    assert cursor.take_tokens(running("ab", 5)) == (3, 5)


def test_usage_counts_every_choice_and_the_cached_prompt() -> None:
    choices = [CompletionOutput(i, "", [1] * (i + 2), "length", None) for i in range(2)]
    usage = usage_of(RequestOutput("r", [1, 2, 3, 4], choices, True, num_cached_tokens=2))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 5, 9)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 2
