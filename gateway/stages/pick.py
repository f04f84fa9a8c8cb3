"""Stage: pick the replica of the pool that will serve the call."""

from __future__ import annotations

from gateway.errors import ServiceUnavailable
from gateway.pipeline import Call
from gateway.routing.balancer import Balancer


class PickReplica:
    """``call.pool`` -> ``call.replica`` (least outstanding requests among healthy replicas)."""

    name = "pick"

    def __init__(self, balancer: Balancer) -> None:
        self.balancer = balancer

    async def __call__(self, call: Call) -> None:
        assert call.pool is not None
        state = self.balancer.pick(call.pool)
        if state is None:
            raise ServiceUnavailable(
                f"No healthy replica in pool `{call.pool}`; try again shortly.",
                code="no_healthy_replica",
                headers={"Retry-After": "1"},
            )
        call.replica = state
