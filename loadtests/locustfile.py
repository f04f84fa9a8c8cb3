"""Sortyard's load test: ``locust -f loadtests/locustfile.py`` (``make loadtest`` drives it via run.py).

User classes live in ``users.py``; the load shape (steady, ramp or burst) is chosen by
``SORTYARD_LOADTEST_SHAPE`` and reads Locust's ``--users`` and ``--run-time``. The over-limit user
exists only when ``SORTYARD_LOADTEST_LIMITED_KEY`` is set. Distributed (``--processes``, ``--master``
/ ``--worker``): every worker reports its rows to the master, and its request count (``workers.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Locust imports this file by path: make the repository root importable for `loadtests.*`
sys.path.append(str(Path(__file__).resolve().parents[1]))

import gevent
from locust import constant, events
from locust.stats import CSV_STATS_INTERVAL_SEC

from loadtests import workers  # noqa: F401  # per-worker request counts in a distributed run
from loadtests.config import LoadTestConfig
from loadtests.shapes import SHAPES
from loadtests.users import (
    AutoTierUser,
    CacheHeavyUser,
    ChatUser,
    SharedPromptUser,
    StreamingUser,
)

_config = LoadTestConfig.from_env()
if _config.shape not in SHAPES:
    raise SystemExit(f"SORTYARD_LOADTEST_SHAPE: expected one of {', '.join(SHAPES)}, got {_config.shape!r}")
Shape = SHAPES[_config.shape]  # Locust runs the one shape class bound in this module

if _config.limited_key:
    from loadtests.users import OverLimitUser  # noqa: F401
if _config.no_wait:  # throughput runs: no think time between a user's requests
    for _user in (AutoTierUser, CacheHeavyUser, ChatUser, SharedPromptUser, StreamingUser):
        _user.wait_time = constant(0)


@events.quit.add_listener
def _last_csv_write(**_kwargs: object) -> None:
    # Locust rewrites its CSVs once a second and closes them at exit without a last write: one
    # more turn of its writer puts requests that finished while users were stopping in them too
    gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.25)


__all__ = ["AutoTierUser", "CacheHeavyUser", "ChatUser", "Shape", "SharedPromptUser", "StreamingUser"]
