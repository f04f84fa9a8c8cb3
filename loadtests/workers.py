"""Distributed runs: how many requests each worker made, told to the master and written beside the CSVs.

Locust's own stats already carry every worker's rows to the master (the HTTP rows and the custom
``SSE``/``TOKENS``/``CACHE``/``ROUTE`` rows alike: they are request events), so the master's CSVs and
``report.summary`` cover all workers. What they do not say is how the requests split between workers:
each worker counts its HTTP requests and sends the count to the master when it stops (a custom
message); the master writes ``<csv prefix>_workers.json`` (worker id -> requests) as counts arrive.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from locust import events
from locust.env import Environment
from locust.rpc import Message
from locust.runners import MasterRunner, WorkerRunner

MESSAGE = "sortyard_worker_requests"
HTTP_TYPES = frozenset({"GET", "POST"})
"""The request types ``report.summary`` counts as requests (the other rows are measurements)."""


def workers_path(csv_prefix: str) -> Path:
    return Path(f"{csv_prefix}_workers.json")


@events.init.add_listener
def _on_init(environment: Environment, **_kwargs: Any) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        _count_on_master(environment, runner)
    elif isinstance(runner, WorkerRunner):
        _count_on_worker(environment, runner)


def _count_on_master(environment: Environment, runner: MasterRunner) -> None:
    counts: dict[str, int] = {}
    csv_prefix = getattr(environment.parsed_options, "csv_prefix", None)

    def on_count(msg: Message, **_kwargs: Any) -> None:
        counts[str(msg.node_id)] = int(msg.data["requests"])
        if csv_prefix:
            workers_path(csv_prefix).write_text(json.dumps(counts, indent=1, sort_keys=True))

    runner.register_message(MESSAGE, on_count)


def _count_on_worker(environment: Environment, runner: WorkerRunner) -> None:
    num_requests = 0

    def on_request(request_type: str, **_kwargs: Any) -> None:
        nonlocal num_requests
        if request_type in HTTP_TYPES:
            num_requests += 1

    def on_stop(**_kwargs: Any) -> None:  # after the users stopped, before the master hears so
        runner.send_message(MESSAGE, {"requests": num_requests})

    environment.events.request.add_listener(on_request)
    environment.events.test_stop.add_listener(on_stop)
