"""A Locust stats CSV in the shape Locust 2.x writes, for tests of the readers."""

from __future__ import annotations

from pathlib import Path

HEADER = (
    "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
    "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
    "99.99%,100%"
)


def row(type_: str, name: str, count: int, failures: int, median: float, size: float, rps: float) -> str:
    times = ",".join([str(median)] * 4)  # median, average, min, max
    percentiles = ",".join([str(median)] * 11)
    return f"{type_},{name},{count},{failures},{times},{size},{rps},0.0,{percentiles}"


def write_stats(prefix: Path, *rows: str) -> Path:
    path = Path(f"{prefix}_stats.csv")
    path.write_text("\n".join([HEADER, *rows, row("", "Aggregated", 999, 0, 1, 1, 1)]) + "\n")
    return path


SAMPLE_ROWS = (
    row("POST", "chat", 100, 0, 850, 512.0, 1.0),
    row("POST", "stream", 50, 1, 2100, 0.0, 0.5),
    row("SSE", "ttft", 50, 0, 420, 0.0, 0.5),
    row("SSE", "tokens_per_s", 50, 0, 23.5, 0.0, 0.5),
    # 120 responses of 40 output tokens on average over 120 / 2.0 = 60 s: 4,800 tokens, 80 tok/s
    row("TOKENS", "output", 120, 0, 900, 40.0, 2.0),
)
