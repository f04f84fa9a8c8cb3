"""Load profiles: how many users should be running t seconds into a test (steady, ramp, burst).

Pure (no Locust import); ``shapes.py`` turns a profile into a Locust ``LoadTestShape``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ProfileKind = Literal["steady", "ramp", "burst"]
PROFILE_KINDS: tuple[ProfileKind, ...] = ("steady", "ramp", "burst")


@dataclass(frozen=True, slots=True)
class LoadProfile:
    """A target user count over time; ``users_at`` returns None once the test should stop."""

    kind: ProfileKind
    num_users: int
    """Peak users (Locust's ``--users``)."""
    run_time_s: float
    """Test length (Locust's ``--run-time``)."""
    min_users: int = 1
    """Floor: at least one user of every class, so every scenario keeps running."""
    ramp_fraction: float = 0.8
    """ramp: reach ``num_users`` after this fraction of the run, then hold."""

    @property
    def burst_period_s(self) -> float:
        """burst: one cycle of baseline then peak; three cycles a run, between 10 s and 60 s each."""
        return min(60.0, max(10.0, self.run_time_s / 3))

    @property
    def burst_s(self) -> float:
        """burst: how long the peak lasts at the end of each cycle."""
        return self.burst_period_s / 4

    @property
    def baseline_users(self) -> int:
        return min(self.num_users, max(self.min_users, self.num_users // 4))

    def users_at(self, t_s: float) -> int | None:
        if t_s >= self.run_time_s:
            return None
        floor = min(self.min_users, self.num_users)
        if self.kind == "ramp":
            ramp_s = self.run_time_s * self.ramp_fraction
            if t_s >= ramp_s:
                return self.num_users
            return max(floor, floor + int((self.num_users - floor) * t_s / ramp_s))
        if self.kind == "burst":
            in_cycle_s = t_s % self.burst_period_s
            is_peak = in_cycle_s >= self.burst_period_s - self.burst_s
            return self.num_users if is_peak else self.baseline_users
        return self.num_users  # steady
