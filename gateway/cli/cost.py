"""``sortyard cost estimate``: the serving playbook's monthly GPU cost, from measured throughput.

    monthly cost = requests per month x tokens per request x GPU-seconds per token x $ per GPU-hour / 3600

Requests are given per month or per day (``--requests-per-day``: times 730 / 24 = 30.42 days, the
average month the GPU-hours are counted in).

GPU-seconds per token (S) is given directly or derived from a result file:

- a Locust stats CSV (``loadtests/results/<name>_stats.csv``, or the ``--csv`` prefix): the
  ``TOKENS``/``output`` row the load test records holds one entry per generated response, its size
  being the output tokens; total tokens / test duration is the replica's throughput, and
  ``S = duration x GPUs per replica / total output tokens``;
- a benchmark JSON (``bench/engine_throughput.py`` prints one): ``output_tok_per_s`` (or
  ``output_tok_s``, or ``output_tokens`` and ``wall_s``), and ``S = GPUs per replica / tok/s``.

Throughput measured at a load below saturation understates what a replica can do, so S derived from
such a run is an upper bound (the estimate errs towards cost).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SECONDS_PER_HOUR = 3600.0
HOURS_PER_DAY = 24.0
HOURS_PER_MONTH = 730.0
"""An average month (365 x 24 / 12), for the average number of GPUs busy and daily request counts."""
TOKENS_ROW = ("TOKENS", "output")
"""(Type, Name) of the Locust row whose entries carry output tokens as their content size."""


class CostInputError(ValueError):
    """A result file or argument the estimate cannot use; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Throughput:
    """GPU-seconds per token, and how it was arrived at."""

    gpu_s_per_token: float
    """GPU-seconds one output token costs."""
    derivation: str
    """One line saying where the figure came from (printed with the estimate)."""


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """The playbook formula's inputs and results."""

    num_requests_per_month: float
    num_tokens_per_request: float
    gpu_s_per_token: float
    gpu_hour_usd: float

    @property
    def gpu_hours_per_month(self) -> float:
        return (
            self.num_requests_per_month
            * self.num_tokens_per_request
            * self.gpu_s_per_token
            / SECONDS_PER_HOUR
        )

    @property
    def monthly_usd(self) -> float:
        return self.gpu_hours_per_month * self.gpu_hour_usd

    @property
    def usd_per_million_tokens(self) -> float:
        return 1e6 * self.gpu_s_per_token * self.gpu_hour_usd / SECONDS_PER_HOUR

    @property
    def average_gpus_busy(self) -> float:
        """GPUs kept busy on average over the month (before any headroom for peaks)."""
        return self.gpu_hours_per_month / HOURS_PER_MONTH


def monthly_cost_usd(
    num_requests_per_month: float, num_tokens_per_request: float, gpu_s_per_token: float, gpu_hour_usd: float
) -> float:
    """The playbook formula, as written."""
    return num_requests_per_month * num_tokens_per_request * gpu_s_per_token * gpu_hour_usd / SECONDS_PER_HOUR


def requests_per_month(*, per_month: float | None = None, per_day: float | None = None) -> float:
    """The formula's requests per month from the one figure given: a day is 1/30.42 of the average
    month (``HOURS_PER_MONTH / HOURS_PER_DAY``)."""
    if per_month is not None and per_day is None:
        return per_month
    if per_day is not None and per_month is None:
        return per_day * HOURS_PER_MONTH / HOURS_PER_DAY
    raise CostInputError("expected requests per month or per day (one of them)")


def _float(row: Mapping[str, str], column: str, source: Path) -> float:
    try:
        return float(row[column])
    except (KeyError, TypeError, ValueError):
        raise CostInputError(f"{source}: column {column!r} missing or not a number") from None


def throughput_from_locust_csv(path: Path, gpus_per_replica: float = 1.0) -> Throughput:
    """S from a Locust stats CSV written by ``loadtests/`` (its ``TOKENS``/``output`` row)."""
    if not path.name.endswith(".csv"):
        path = path.with_name(path.name + "_stats.csv")  # a --csv prefix
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise CostInputError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CostInputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    row = next((r for r in rows if (r.get("Type"), r.get("Name")) == TOKENS_ROW), None)
    if row is None:
        raise CostInputError(
            f"{path}: no {TOKENS_ROW[0]}/{TOKENS_ROW[1]} row (was it written by loadtests/locustfile.py?)"
        )
    num_responses = _float(row, "Request Count", path)
    mean_tokens = _float(row, "Average Content Size", path)
    responses_per_s = _float(row, "Requests/s", path)
    total_tokens = num_responses * mean_tokens
    if total_tokens <= 0 or responses_per_s <= 0:
        raise CostInputError(f"{path}: no output tokens were recorded")
    # Locust's Requests/s is the row's count over the time it spanned: that gives the duration back
    duration_s = num_responses / responses_per_s
    tok_per_s = total_tokens / duration_s
    return Throughput(
        gpus_per_replica / tok_per_s,
        f"from {path}: {total_tokens:,.0f} output tokens in {duration_s:,.1f} s = {tok_per_s:,.1f} tok/s "
        f"on {gpus_per_replica:g} GPU(s); S = {duration_s:,.1f} s x {gpus_per_replica:g} / "
        f"{total_tokens:,.0f} tokens (at the load offered; a saturated replica does better)",
    )


def _bench_tok_per_s(result: Mapping[str, Any]) -> float | None:
    for name in ("output_tok_per_s", "output_tok_s", "output_tokens_per_s"):
        if isinstance(result.get(name), int | float):
            return float(result[name])
    tokens, wall_s = result.get("output_tokens"), result.get("wall_s")
    if isinstance(tokens, int | float) and isinstance(wall_s, int | float) and wall_s > 0:
        return float(tokens) / float(wall_s)
    return None


def throughput_from_bench_json(path: Path, gpus_per_replica: float = 1.0) -> Throughput:
    """S from a benchmark's JSON result (the last JSON line of its output also works)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CostInputError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CostInputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    result: Any = None
    try:
        result = json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip().startswith("{")]
        try:
            result = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            result = None
    if not isinstance(result, dict):
        raise CostInputError(f"{path}: expected a JSON object")
    tok_per_s = _bench_tok_per_s(result)
    if tok_per_s is None or tok_per_s <= 0:
        raise CostInputError(
            f"{path}: expected a positive 'output_tok_per_s' "
            "(or 'output_tok_s', or 'output_tokens' and 'wall_s')"
        )
    system = f" ({result['system']})" if isinstance(result.get("system"), str) else ""
    return Throughput(
        gpus_per_replica / tok_per_s,
        f"from {path}{system}: {tok_per_s:,.1f} output tok/s on {gpus_per_replica:g} GPU(s); "
        f"S = {gpus_per_replica:g} / {tok_per_s:,.1f}",
    )


def throughput_from_result(path: Path, gpus_per_replica: float = 1.0) -> Throughput:
    """S from a Locust stats CSV or a benchmark JSON, chosen by the file's name."""
    if path.suffix == ".json" or (path.suffix != ".csv" and path.exists()):
        return throughput_from_bench_json(path, gpus_per_replica)
    return throughput_from_locust_csv(path, gpus_per_replica)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_estimate_arguments(estimate: argparse.ArgumentParser) -> None:
    """The arguments of ``sortyard cost estimate`` (the CLI's tree holds the parser)."""
    requests = estimate.add_mutually_exclusive_group(required=True)
    requests.add_argument("--requests-per-month", type=_positive, metavar="N", help="requests a month")
    requests.add_argument(
        "--requests-per-day",
        type=_positive,
        metavar="N",
        help="instead of --requests-per-month: N x 30.42 days (730 hours / 24) a month",
    )
    estimate.add_argument("--tokens-per-request", type=_positive, required=True, help="output tokens")
    source = estimate.add_mutually_exclusive_group(required=True)
    source.add_argument("--gpu-seconds-per-token", type=_positive)
    source.add_argument(
        "--from-result",
        type=Path,
        metavar="FILE",
        help="a Locust stats CSV (or --csv prefix) or a bench JSON",
    )
    estimate.add_argument("--gpu-hour-usd", type=_positive, required=True, help="$ per GPU-hour")
    estimate.add_argument(
        "--gpus-per-replica",
        type=_positive,
        default=None,
        help="GPUs behind the measured replica (with --from-result; default 1)",
    )


def is_finite(estimate: CostEstimate) -> bool:
    """Does every figure :func:`render` prints fit in a float? Each input may be finite while their
    product is not (``1e200 x 1e200``): a ``$inf`` estimate would read as an answer."""
    figures = (
        estimate.num_requests_per_month,
        estimate.monthly_usd,
        estimate.gpu_hours_per_month,
        estimate.usd_per_million_tokens,
        estimate.average_gpus_busy,
    )
    return all(math.isfinite(figure) for figure in figures)


def render(
    estimate: CostEstimate, throughput: Throughput | None, *, num_requests_per_day: float | None = None
) -> str:
    """The lines ``sortyard cost estimate`` prints."""
    lines = [
        f"monthly cost: ${estimate.monthly_usd:,.2f}",
        f"  = {estimate.num_requests_per_month:,.0f} requests x {estimate.num_tokens_per_request:,.0f} tokens"
        f" x {estimate.gpu_s_per_token:.6g} GPU-s/token x ${estimate.gpu_hour_usd:,.2f}/GPU-hour / 3600",
    ]
    if num_requests_per_day is not None:
        lines.append(
            f"  requests per month = {num_requests_per_day:,.0f} a day"
            f" x {HOURS_PER_MONTH / HOURS_PER_DAY:.2f} days"
        )
    lines += [
        f"cost per 1M tokens: ${estimate.usd_per_million_tokens:,.4f}",
        f"GPU-hours per month: {estimate.gpu_hours_per_month:,.1f}"
        f" (on average {estimate.average_gpus_busy:,.2f} GPUs busy, before headroom for peaks)",
    ]
    if throughput is not None:
        lines.append(f"GPU-seconds per token: {throughput.gpu_s_per_token:.6g}, {throughput.derivation}")
    return "\n".join(lines) + "\n"


def estimate_main(args: argparse.Namespace) -> int:
    """``sortyard cost estimate``, its arguments parsed (see :func:`add_estimate_arguments`)."""
    throughput: Throughput | None = None
    if args.from_result is not None:
        try:
            throughput = throughput_from_result(args.from_result, args.gpus_per_replica or 1.0)
        except CostInputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        gpu_s_per_token = throughput.gpu_s_per_token
    else:
        if args.gpus_per_replica is not None:
            print(
                "error: --gpus-per-replica applies to --from-result; "
                "--gpu-seconds-per-token already counts every GPU",
                file=sys.stderr,
            )
            return 2
        gpu_s_per_token = args.gpu_seconds_per_token
    num_requests = requests_per_month(per_month=args.requests_per_month, per_day=args.requests_per_day)
    estimate = CostEstimate(num_requests, args.tokens_per_request, gpu_s_per_token, args.gpu_hour_usd)
    if not is_finite(estimate):
        print(
            "error: the estimate overflows (a figure is beyond any float); check the inputs", file=sys.stderr
        )
        return 2
    sys.stdout.write(render(estimate, throughput, num_requests_per_day=args.requests_per_day))
    return 0
