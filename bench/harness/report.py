"""The results: one row per target (medians over rounds), as a markdown table and as JSON."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .measure import Point
from .targets import DIRECT_LABEL, Target


@dataclass(frozen=True)
class Goals:
    """The issue's targets for a gateway on one core."""

    min_requests_per_s_c16: float = 3500.0
    """Non-streaming req/s at 16 connections."""
    min_streams_per_s: float = 2500.0
    """20-chunk SSE streams/s at the stream concurrency."""
    max_added_p50_ms_c1: float = 0.5
    """p50 through the target minus p50 direct to nginx, one connection."""


GOAL_SETS = {
    "spine": Goals(),
    "full-policy": Goals(min_requests_per_s_c16=2000.0, min_streams_per_s=1500.0, max_added_p50_ms_c1=0.7),
}
"""Targets by name: the spine's (issue 2) and the full default policy's (issue 8)."""


@dataclass(frozen=True)
class Row:
    """One target's figures: medians over the rounds, keyed by concurrency where they depend on it."""

    label: str
    kind: str
    policy: str | None
    env: Mapping[str, str]
    requests_per_s: dict[int, float]
    p50_ms: dict[int, float]
    p99_ms: dict[int, float]
    cpu_ms_per_request: dict[int, float]
    streams_per_s: float
    stream_p50_ms: float
    stream_p99_ms: float
    stream_cpu_ms_per_request: float
    cpu_utilization: dict[int, float]
    """Busy fraction of a core during the plain runs (see Point.cpu_utilization)."""
    stream_cpu_utilization: float
    added_p50_ms_c1: float | None
    """None for nginx itself, or when c=1 was not measured."""
    rss_mib: float
    """RSS of the target's process tree after the runs (nginx master + worker for the direct row)."""
    startup_s: float
    extra: dict[str, Any] = field(default_factory=dict)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _by_conn(points: Sequence[Point], attr: str) -> dict[int, float]:
    """Median of ``attr`` (a WrkResult field, or a Point's CPU field) per connection count."""
    conns = sorted({p.num_connections for p in points})
    return {c: _median([_value(p, attr) for p in points if p.num_connections == c]) for c in conns}


def _value(point: Point, attr: str) -> float:
    if attr in ("cpu_ms_per_request", "cpu_utilization"):
        return float(getattr(point, attr))
    return float(getattr(point.result, attr))


def summarize(targets: Sequence[Target], points: Sequence[Point], rss_mib: Mapping[str, float]) -> list[Row]:
    direct_c1 = [p for p in points if p.label == DIRECT_LABEL and not p.is_stream and p.num_connections == 1]
    direct_p50_ms = _median([p.result.p50_ms for p in direct_c1]) if direct_c1 else None
    rows = []
    for target in targets:
        plain = [p for p in points if p.label == target.label and not p.is_stream]
        streamed = [p for p in points if p.label == target.label and p.is_stream]
        p50 = _by_conn(plain, "p50_ms")
        is_added = target.kind != "direct" and 1 in p50 and direct_p50_ms is not None
        rows.append(
            Row(
                label=target.label,
                kind=target.kind,
                policy=target.policy,
                env=dict(target.env),
                requests_per_s=_by_conn(plain, "requests_per_s"),
                p50_ms=p50,
                p99_ms=_by_conn(plain, "p99_ms"),
                cpu_ms_per_request=_by_conn(plain, "cpu_ms_per_request"),
                streams_per_s=_median([p.result.requests_per_s for p in streamed]),
                stream_p50_ms=_median([p.result.p50_ms for p in streamed]),
                stream_p99_ms=_median([p.result.p99_ms for p in streamed]),
                stream_cpu_ms_per_request=_median([p.cpu_ms_per_request for p in streamed]),
                cpu_utilization=_by_conn(plain, "cpu_utilization"),
                stream_cpu_utilization=_median([p.cpu_utilization for p in streamed]),
                added_p50_ms_c1=p50[1] - direct_p50_ms if is_added and direct_p50_ms is not None else None,
                rss_mib=rss_mib.get(target.label, float("nan")),
                startup_s=target.startup_s,
            )
        )
    return rows


def _slashed(values: Mapping[int, float], conns: Sequence[int], fmt: str) -> str:
    return " / ".join(format(values[c], fmt) if c in values else "-" for c in conns)


def markdown_table(rows: Sequence[Row], conns: Sequence[int], stream_conns: int) -> str:
    """The README table: one line per target; ``a / b / c`` cells follow the concurrency order."""
    cs = "/".join(str(c) for c in conns)
    cpu_c = 16 if 16 in conns else conns[-1]
    head = (
        f"| target | req/s c={cs} | p50 ms c={cs} | p99 ms c={cs} | added p50 c=1 | "
        f"streams/s c={stream_conns} | stream p50 / p99 ms | CPU ms/req c={cpu_c} | CPU ms/stream | RSS MiB |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for row in rows:
        added = "-" if row.added_p50_ms_c1 is None else f"{row.added_p50_ms_c1:+.3f} ms"
        cpu = row.cpu_ms_per_request.get(cpu_c, float("nan"))
        rps = _slashed(row.requests_per_s, conns, ",.0f")
        lines.append(
            f"| {row.label} | {rps} | {_slashed(row.p50_ms, conns, '.3f')} | "
            f"{_slashed(row.p99_ms, conns, '.3f')} | {added} | {row.streams_per_s:,.0f} | "
            f"{row.stream_p50_ms:.3f} / {row.stream_p99_ms:.3f} | {cpu:.3f} | "
            f"{row.stream_cpu_ms_per_request:.3f} | {row.rss_mib:.0f} |"
        )
    return "\n".join(lines)


def check_goals(
    rows: Sequence[Row], goals: Goals, stream_conns: int, per_label: Mapping[str, Goals] | None = None
) -> list[str]:
    """One line per gateway row and goal: ``ok`` or ``MISS`` with the figure (``per_label`` overrides
    ``goals`` for the rows it names)."""
    lines = []
    for row in rows:
        if row.kind != "gateway":
            continue
        goals_of_row = (per_label or {}).get(row.label, goals)
        lines += _check_row(row, goals_of_row, stream_conns)
    return lines


def check_within(rows: Sequence[Row], within: Sequence[tuple[str, str, float]]) -> list[str]:
    """``(label, base, fraction)``: the row's req/s at c=16 is at most ``fraction`` below the base's."""
    by_label = {row.label: row for row in rows}
    lines = []
    for label, base, fraction in within:
        row, ref = by_label.get(label), by_label.get(base)
        if row is None or ref is None or 16 not in row.requests_per_s or 16 not in ref.requests_per_s:
            lines.append(f"{label}: MISS no c=16 figures to compare with {base}")
            continue
        ratio = row.requests_per_s[16] / ref.requests_per_s[16]
        lines.append(
            f"{label}: {'ok  ' if ratio >= 1 - fraction else 'MISS'} req/s c=16 {ratio:.1%} of {base}'s "
            f"({row.requests_per_s[16]:,.0f} / {ref.requests_per_s[16]:,.0f}) >= {1 - fraction:.0%}"
        )
    return lines


def _check_row(row: Row, goals: Goals, stream_conns: int) -> list[str]:
    checks = []
    if 16 in row.requests_per_s:
        rps = row.requests_per_s[16]
        checks.append(
            (
                rps >= goals.min_requests_per_s_c16,
                f"req/s c=16 {rps:,.0f} >= {goals.min_requests_per_s_c16:,.0f}",
            )
        )
    if stream_conns == 16:
        checks.append(
            (
                row.streams_per_s >= goals.min_streams_per_s,
                f"streams/s c=16 {row.streams_per_s:,.0f} >= {goals.min_streams_per_s:,.0f}",
            )
        )
    if row.added_p50_ms_c1 is not None:
        checks.append(
            (
                row.added_p50_ms_c1 <= goals.max_added_p50_ms_c1,
                f"added p50 c=1 {row.added_p50_ms_c1:.3f} ms <= {goals.max_added_p50_ms_c1} ms",
            )
        )
    return [f"{row.label}: {'ok  ' if passed else 'MISS'} {text}" for passed, text in checks]


def noise_notes(rows: Sequence[Row], *, min_utilization: float = 0.85) -> list[str]:
    """Warnings for Python rows that did not keep their core busy at their highest concurrency.

    A CPU-bound server under 16+ connections should use ~100% of its core; much less means another
    process shared the pinned core, and its req/s reads low (CPU ms/req stays comparable).
    """
    notes = []
    for row in rows:
        if row.kind == "direct" or not row.cpu_utilization:
            continue
        top = max(row.cpu_utilization)
        used = row.cpu_utilization[top]
        if top >= 16 and used < min_utilization:
            cpu_ms = row.cpu_ms_per_request.get(16, row.cpu_ms_per_request[top])
            estimate = f"{1000.0 / cpu_ms:,.0f} req/s" if cpu_ms > 0 else "n/a"
            if row.stream_cpu_ms_per_request > 0:
                estimate += f", {1000.0 / row.stream_cpu_ms_per_request:,.0f} streams/s"
            notes.append(
                f"{row.label} used {used:.0%} of a core at c={top}: the pinned core was shared or the "
                f"target waited on something; compare CPU ms/req rather than req/s "
                f"(a whole core at the c=16 CPU cost: {estimate})"
            )
    return notes


def to_json(meta: Mapping[str, Any], rows: Sequence[Row], points: Sequence[Point]) -> dict[str, Any]:
    return {
        "meta": dict(meta),
        "rows": [asdict(row) for row in rows],
        "points": [
            {
                "label": p.label,
                "round": p.round_index,
                "stream": p.is_stream,
                "connections": p.num_connections,
                "cpu_ms_per_request": p.cpu_ms_per_request,
                "cpu_utilization": p.cpu_utilization,
                **asdict(p.result),
            }
            for p in points
        ],
    }
