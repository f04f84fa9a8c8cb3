"""A gateway loop blocked past a Redis call's bound, with Redis's reply already in the socket.

``block_after_write(client, at_least_s)`` makes the client's next write block its event loop until
Redis has answered (the reply waits in the socket) and ``at_least_s`` has passed: exactly the stall of
a long GC pass or a starved process, made deterministic. Nothing is timed by a guess: the loop resumes
only once the reply is there, however slow the machine.
"""

from __future__ import annotations

import select
import time

from gateway.redis_client.resp import RespClient

REPLY_WAIT_S = 30.0
"""A bound on waiting for Redis's reply inside the stall, so a broken test fails instead of hanging."""


def block_after_write(client: RespClient, at_least_s: float) -> None:
    """Block the loop after the client's next write (once) until the reply is readable and
    ``at_least_s`` has passed. The client must be connected."""
    protocol = client._protocol
    assert protocol is not None, "connect the client first"
    sock = protocol.transport.get_extra_info("socket")
    write = protocol.flush

    def write_then_block() -> None:
        del protocol.flush  # once: later writes are the class's own flush
        write()
        started = time.monotonic()
        readable, _, _ = select.select([sock], [], [], REPLY_WAIT_S)
        assert readable, f"Redis did not answer within {REPLY_WAIT_S} s"
        time.sleep(max(0.0, at_least_s - (time.monotonic() - started)))

    protocol.flush = write_then_block  # type: ignore[method-assign]
