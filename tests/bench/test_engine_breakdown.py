"""bench/engine_throughput.py --breakdown (quoted in docs/benchmarks.md): the seconds in each kind of
work, inside the forward pass that contains them, and the wrappers gone afterwards."""

from __future__ import annotations

import engine_breakdown
import engine_throughput
import pytest

from backends.engine.layers.linear import MergedLinear

pytestmark = pytest.mark.slow


def test_breakdown_names_where_the_forward_pass_went() -> None:
    forward = MergedLinear.forward

    result = engine_throughput.main(["--num-requests", "2", "--breakdown"])

    seconds = result["seconds_in"]
    assert isinstance(seconds, dict)
    assert {"forward pass", "GEMMs", "decode attention", "prefill attention"} <= set(seconds)
    parts = sum(v for k, v in seconds.items() if k != "forward pass")
    assert 0 < parts <= seconds["forward pass"] + 0.05  # inside the pass (rounding aside)
    assert MergedLinear.forward is forward  # unwrapped
    assert all(getattr(owner, name) is not None for owner, name, _ in engine_breakdown.TIMED)


def test_breakdown_is_for_the_in_process_run() -> None:
    with pytest.raises(SystemExit):
        engine_throughput.main(["--breakdown", "--through-server"])
