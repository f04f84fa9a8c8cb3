"""A kind's recorded wire behind a real gateway, for the compatibility scenarios: ``WireSetup``.

Three fakes play the transcript (``tests/support/wire_fake.py``): the ``<kind>`` pool's replica
(``single``) and the ``<kind>-pair``'s two (``busy``, ``idle``), in a policy from ``compat_policy``.
``make_busy`` has the busy fake answer its load page with a recorded busy page, and returns once the
gateway has scraped it (and, on leaving, the idle page again): conditions, never sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.backends_compat.scenarios import Target, compat_policy, wait_until
from tests.support.wire_fake import WireFake, load_transcript
from tools.servers.gateway_server import GatewayServer, write_policy


def exchange(transcript: dict[str, Any], name: str) -> dict[str, Any]:
    """The transcript's exchange called ``name``."""
    found: dict[str, Any] = next(e for e in transcript["exchanges"] if e["name"] == name)
    return found


class WireSetup:
    """The fakes, the gateway and what the scenarios' ``Target`` needs of them."""

    def __init__(
        self,
        kind: str,
        model: str,
        tmp: Path,
        *,
        load_page: str,
        busy_page: str,
        busy_waiting: float,
        adjust: Callable[[dict[str, Any], WireSetup], None] | None = None,
    ) -> None:
        """``load_page``: the transcript's exchange a replica's load page is; ``busy_page``: the one
        the busy fake answers it with, which the gateway reads as ``busy_waiting`` waiting requests;
        ``adjust``: edits the policy before the gateway starts."""
        self.kind = kind
        self.transcript = load_transcript(kind)
        self.single = WireFake(self.transcript).start()
        self.busy = WireFake(self.transcript).start()
        self.idle = WireFake(self.transcript).start()
        self.load_page, self.busy_page, self.busy_waiting = load_page, busy_page, busy_waiting
        policy = compat_policy(kind, self.single.origin, (self.busy.origin, self.idle.origin), model=model)
        if adjust is not None:
            adjust(policy, self)
        self.server = GatewayServer(write_policy(tmp / "policy.yaml", policy)).start()

    def fakes(self) -> tuple[WireFake, ...]:
        return self.single, self.busy, self.idle

    def unmatched(self) -> list[tuple[str, str, Any]]:
        """Requests no recorded exchange matched, on any fake."""
        return [request for fake in self.fakes() for request in fake.unmatched]

    def pair(self) -> tuple[Any, Any]:
        """The ``<kind>-pair`` pool's replica states: the busy one's, the idle one's."""
        states = {s.replica.name: s for s in self.server.gateway.balancer.replicas(f"{self.kind}-pair")}
        return states[f"{self.kind}-a"], states[f"{self.kind}-b"]

    def is_fresh(self, state: Any) -> bool:
        return bool(state.load_fresh_until > self.server.gateway.balancer.clock())

    @contextmanager
    def make_busy(self) -> Iterator[Callable[[], bool]]:
        self.busy.overrides[self.load_page] = exchange(self.transcript, self.busy_page)["response"]
        try:
            weighed = self._scraped(self.busy_waiting)
            wait_until(weighed, what="the busy replica's load page scraped")
            yield weighed
        finally:
            self.busy.overrides.pop(self.load_page, None)
            wait_until(self._scraped(0.0), what="the busy replica's idle load page scraped again")

    def _scraped(self, waiting: float) -> Callable[[], bool]:
        def condition() -> bool:
            a, b = self.pair()
            return a.num_waiting == waiting and b.num_waiting == 0.0 and self.is_fresh(a) and self.is_fresh(b)

        return condition

    def served(self) -> tuple[int, int]:
        a, b = self.pair()
        return a.num_requests, b.num_requests

    def target(self, **scenario: Any) -> Target:
        """The scenarios' target; ``scenario`` gives ``cut_request``, ``rejected``, ``rejected_status``.
        A recorded stream for ``cut_request`` is itself cut off, so ``cut`` has nothing to do."""
        return Target(
            kind=self.kind,
            gateway_url=self.server.url,
            cut=lambda: None,
            make_busy=self.make_busy,
            served=self.served,
            **scenario,
        )

    def stop(self) -> None:
        self.server.stop()
        for fake in self.fakes():
            fake.stop()
