"""The benchmark's one table: rows of (section, measurement, value, unit, note), printed as Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One measurement; ``value`` None when it could not be taken (``note`` says why)."""

    section: str
    measurement: str
    value: float | str | None
    unit: str = ""
    note: str = ""


HEADER = ("section", "measurement", "value", "unit", "note")


def format_value(value: float | str | None) -> str:
    """Numbers with three significant digits at most (thousands grouped), text as it is, None as -."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(rows: Sequence[Row]) -> str:
    """A Markdown table of ``rows``, columns padded to their widest cell."""
    cells = [HEADER, *((r.section, r.measurement, format_value(r.value), r.unit, r.note) for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def gb_per_s(num_bytes: float, seconds: float) -> float:
    """Bytes over seconds in GB/s (10^9 bytes)."""
    return num_bytes / seconds / 1e9 if seconds > 0 else 0.0
