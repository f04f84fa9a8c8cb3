"""Reading a finished run's Locust CSVs: the rows, the failures, and a short summary to print.

Pure (no Locust import): ``run.py`` prints the summary and the smoke test asserts on the rows. In a
distributed run the master's CSVs hold every worker's rows (Locust sends them), so the summary covers
all workers; ``<prefix>_workers.json`` (``workers.py``) says how the requests split.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class StatsRow:
    """One line of ``<prefix>_stats.csv``."""

    type: str
    name: str
    num_requests: int
    num_failures: int
    median_ms: float
    p95_ms: float
    mean_content_size: float
    requests_per_s: float


def _number(text: str | None) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0  # Locust writes "N/A" for empty percentiles


def read_stats(prefix: Path) -> list[StatsRow]:
    """The per-request-name rows of ``<prefix>_stats.csv`` (the Aggregated row left out)."""
    with Path(f"{prefix}_stats.csv").open(newline="", encoding="utf-8") as f:
        return [
            StatsRow(
                type=row["Type"],
                name=row["Name"],
                num_requests=int(_number(row["Request Count"])),
                num_failures=int(_number(row["Failure Count"])),
                median_ms=_number(row["Median Response Time"]),
                p95_ms=_number(row.get("95%")),
                mean_content_size=_number(row["Average Content Size"]),
                requests_per_s=_number(row["Requests/s"]),
            )
            for row in csv.DictReader(f)
            if row["Name"] != "Aggregated"
        ]


def read_failures(prefix: Path) -> list[str]:
    """``<prefix>_failures.csv`` and ``_exceptions.csv`` as one line each (empty: none)."""
    lines = []
    for suffix, fields in (
        ("failures", ("Method", "Name", "Error", "Occurrences")),
        ("exceptions", ("Count", "Message")),
    ):
        path = Path(f"{prefix}_{suffix}.csv")
        if path.exists():
            with path.open(newline="", encoding="utf-8") as f:
                lines += [" | ".join(row.get(k) or "" for k in fields) for row in csv.DictReader(f)]
    return lines


def read_workers(prefix: Path) -> dict[str, int]:
    """``<prefix>_workers.json`` of a distributed run: requests per worker (empty: not distributed)."""
    path = Path(f"{prefix}_workers.json")
    if not path.exists():
        return {}
    return {str(name): int(count) for name, count in json.loads(path.read_text()).items()}


def summary(rows: Sequence[StatsRow], workers: Mapping[str, int] | None = None) -> str:
    """The headline figures: requests and failures, time to first token, decode speed, output tokens;
    with ``workers`` (a distributed run), how the requests split between them."""
    by_key = {(row.type, row.name): row for row in rows}
    http_rows = [row for row in rows if row.type in ("POST", "GET")]
    lines = [
        f"requests: {sum(r.num_requests for r in http_rows):,}, "
        f"failed unexpectedly: {sum(r.num_failures for r in rows):,}"
    ]
    if (ttft := by_key.get(("SSE", "ttft"))) is not None:
        lines.append(f"time to first token: median {ttft.median_ms:,.0f} ms, p95 {ttft.p95_ms:,.0f} ms")
    if (speed := by_key.get(("SSE", "tokens_per_s"))) is not None:
        lines.append(f"decode speed per stream: median {speed.median_ms:,.1f} tok/s")
    if (tokens := by_key.get(("TOKENS", "output"))) is not None and tokens.requests_per_s > 0:
        num_tokens = tokens.mean_content_size * tokens.num_requests
        tok_per_s = tokens.mean_content_size * tokens.requests_per_s
        lines.append(f"output tokens generated: {num_tokens:,.0f}, {tok_per_s:,.1f} tok/s overall")
    if workers:
        split = ", ".join(f"{count:,}" for count in sorted(workers.values(), reverse=True))
        lines.append(f"workers: {len(workers)} (requests each: {split})")
    return "\n".join(lines)
