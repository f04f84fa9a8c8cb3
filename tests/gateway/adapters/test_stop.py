"""Stop strings: a text ends before the first one to complete, a stream holds back what may begin one."""

from __future__ import annotations

import pytest

from gateway.adapters.stop import StopScanner, cut_at_stop, stop_strings


def test_stop_strings_reads_openais_stop() -> None:
    assert stop_strings(None) == () and stop_strings("") == () and stop_strings("\n") == ("\n",)
    assert stop_strings([" is", "", "."]) == (" is", ".")
    assert stop_strings(5) is None and stop_strings(["a", 1]) is None


def test_cut_at_stop_ends_the_text_before_the_first_stop_string() -> None:
    assert cut_at_stop("The sea is blue.", [" is"]) == ("The sea", True)
    assert cut_at_stop("The sea is blue.", [" was"]) == ("The sea is blue.", False)
    assert cut_at_stop("The sea is blue.", []) == ("The sea is blue.", False)
    # the one complete first wins: "c" completes before "abcd" does
    assert cut_at_stop("xabcd", ["abcd", "c"]) == ("xab", True)
    # two completing together: the one that started first (the longer)
    assert cut_at_stop("xabc", ["abc", "bc"]) == ("x", True)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_a_stream_cut_into_pieces_ends_where_the_whole_text_would(size: int) -> None:
    text = "The sea is a vast expanse of blue water."
    for stops in ([" vast"], [" a v", "water"], ["."], ["nowhere"], [" is", " sea i"]):
        scanner = StopScanner(stops)
        out = "".join(scanner.feed(text[i : i + size]) for i in range(0, len(text), size)) + scanner.flush()
        expected, stopped = cut_at_stop(text, stops)
        assert (out, scanner.stopped) == (expected, stopped), (stops, size)


def test_a_scanner_holds_back_only_what_may_begin_a_stop_string() -> None:
    scanner = StopScanner(["</s>"])
    assert scanner.feed("Hello <") == "Hello "
    assert scanner.feed("/") == ""
    assert scanner.feed("p>") == "</p>"
    assert scanner.feed(" bye </s> more") == " bye "
    assert scanner.stopped and scanner.feed("again") == "" and scanner.flush() == ""


def test_a_scanner_without_stop_strings_passes_everything() -> None:
    scanner = StopScanner([""])
    assert scanner.feed("a") == "a" and scanner.flush() == "" and not scanner.stopped
