"""Locust load shapes over ``profiles.LoadProfile``: steady, ramp, burst.

Each reads Locust's own ``--users``, ``--spawn-rate`` and ``--run-time`` (``use_common_options``),
so one command line drives any shape. ``locustfile.py`` exposes exactly one of them, picked by
``SORTYARD_LOADTEST_SHAPE``.
"""

from __future__ import annotations

from typing import ClassVar

from locust import LoadTestShape

from loadtests.profiles import LoadProfile, ProfileKind

DEFAULT_RUN_TIME_S = 60


class ProfileShape(LoadTestShape):
    """Follows a ``LoadProfile`` built from the command line on the first tick."""

    abstract = True
    use_common_options = True
    kind: ClassVar[ProfileKind] = "steady"
    _profile: LoadProfile | None = None

    def profile(self) -> LoadProfile:
        if self._profile is None:
            assert self.runner is not None
            options = self.runner.environment.parsed_options
            num_users = int(getattr(options, "num_users", None) or 1)
            run_time_s = float(getattr(options, "run_time", None) or DEFAULT_RUN_TIME_S)
            num_classes = len(self.runner.user_classes)
            self._profile = LoadProfile(self.kind, num_users, run_time_s, min_users=num_classes)
        return self._profile

    def tick(self) -> tuple[int, float] | None:
        profile = self.profile()
        num_users = profile.users_at(self.get_run_time())
        if num_users is None:
            return None
        assert self.runner is not None
        options = self.runner.environment.parsed_options
        spawn_rate = float(getattr(options, "spawn_rate", None) or profile.num_users)
        return num_users, spawn_rate


class SteadyShape(ProfileShape):
    """``--users`` for the whole ``--run-time``."""

    kind = "steady"


class RampShape(ProfileShape):
    """From one user a class up to ``--users`` over 80% of the run, then hold."""

    kind = "ramp"


class BurstShape(ProfileShape):
    """A quarter of ``--users``, jumping to all of them for the last quarter of each cycle."""

    kind = "burst"


SHAPES: dict[str, type[ProfileShape]] = {"steady": SteadyShape, "ramp": RampShape, "burst": BurstShape}
