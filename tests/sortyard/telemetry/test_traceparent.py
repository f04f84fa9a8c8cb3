"""sortyard/telemetry/traceparent.py: a W3C ``traceparent`` read into a remote span context and written
back, and every malformed header refused."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanContext, TraceFlags

from sortyard.telemetry.traceparent import parse_traceparent, traceparent_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
SAMPLED = f"00-{TRACE}-{SPAN}-01"
NOT_SAMPLED = f"00-{TRACE}-{SPAN}-00"


def test_a_sampled_header_reads_into_a_remote_context() -> None:
    context = parse_traceparent(SAMPLED)
    assert context is not None
    assert (context.trace_id, context.span_id) == (int(TRACE, 16), int(SPAN, 16))
    assert context.is_remote and context.trace_flags.sampled and context.is_valid


def test_an_unsampled_header_is_read_too() -> None:
    context = parse_traceparent(NOT_SAMPLED)
    assert context is not None and not context.trace_flags.sampled


@pytest.mark.parametrize(
    "header", [SAMPLED, NOT_SAMPLED, f"00-{'f' * 32}-{'f' * 16}-01", f"00-{'0' * 31}1-{'0' * 15}1-00"]
)
def test_parse_then_format_gives_the_header_back(header: str) -> None:
    context = parse_traceparent(header)
    assert context is not None
    assert traceparent_of(context) == header


def test_format_then_parse_gives_the_context_back() -> None:
    context = SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    header = traceparent_of(context)
    assert header == f"00-{0x1234:032x}-{0x5678:016x}-01"
    parsed = parse_traceparent(header)
    assert parsed is not None
    assert (parsed.trace_id, parsed.span_id, parsed.trace_flags) == (0x1234, 0x5678, context.trace_flags)


def test_surrounding_whitespace_and_upper_case_hex_are_accepted() -> None:
    context = parse_traceparent(f"  00-{TRACE.upper()}-{SPAN.upper()}-01 \t")
    assert context is not None and context.trace_id == int(TRACE, 16)


def test_a_later_version_may_carry_more_fields() -> None:
    """W3C: a parser reads a future version's first four fields and ignores the rest."""
    context = parse_traceparent(f"01-{TRACE}-{SPAN}-01-more")
    assert context is not None and context.span_id == int(SPAN, 16)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "00-0-0-01",
        f"00-{TRACE}-{SPAN}",  # three fields
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"0-{TRACE}-{SPAN}-01",  # version not two characters
        f"{SAMPLED}-extra",  # version 00 has exactly four fields
        f"00-{TRACE[:-1]}-{SPAN}-01",  # short trace id
        f"00-{TRACE}0-{SPAN}-01",  # long trace id
        f"00-{TRACE}-{SPAN[:-1]}-01",  # short span id
        f"00-{TRACE}-{SPAN}-1",  # one-character flags
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero span id
        f"00-{TRACE[:-1]}z-{SPAN}-01",  # not hex
        f"00-{TRACE}-zzzzzzzzzzzzzzzz-01",
        f"00-{TRACE}-{SPAN}-zz",
        f"00-+{TRACE[1:]}-{SPAN}-01",  # int(x, 16) would take a sign,
        f"00-{TRACE[:4]}_{TRACE[5:]}-{SPAN}-01",  # an underscore
        f"00-{TRACE}- {SPAN[1:]}-01",  # or a space
        f"0x-{TRACE}-{SPAN}-01",  # the version is hex too
    ],
)
def test_malformed_headers_are_refused(header: str) -> None:
    assert parse_traceparent(header) is None
