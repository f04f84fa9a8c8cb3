"""gateway/http_protocol.py's RequestHook: a request's line to its connection (the slow-client and
malformed-request behaviour of the protocol is in tests/reliability/test_slow_clients.py and
tests/reliability/test_bad_input.py)."""

from __future__ import annotations

from typing import Any

from gateway.http_protocol import RequestHook


class Transport:
    """Records each write as one system call would be."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def hooked() -> tuple[RequestHook, Transport]:
    transport = Transport()
    hook: Any = RequestHook(transport)  # type: ignore[arg-type]
    return hook, transport


def test_writes_pass_through_until_held() -> None:
    hook, transport = hooked()
    hook.write(b"HTTP/1.1 200 OK\r\n\r\n")
    hook.write(b"{}")
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n", b"{}"]


def test_held_writes_leave_in_one_write_on_release() -> None:
    hook, transport = hooked()
    hook.hold()
    hook.write(b"HTTP/1.1 200 OK\r\n\r\n")
    hook.write(b"{}")
    assert transport.writes == []
    hook.release()
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    hook.write(b"more")  # through again
    hook.release()  # a second release writes nothing
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}", b"more"]


def test_closing_writes_what_was_held_first() -> None:
    hook, transport = hooked()
    hook.hold()
    hook.write(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
    hook.close()
    assert transport.writes == [b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n"]
    assert transport.closed and hook.is_closing()


def test_fire_calls_the_callback_when_one_is_set_and_remembers() -> None:
    hook, _ = hooked()
    calls: list[str] = []
    hook.fire()
    assert hook.is_fired and calls == []
    hook.callback = lambda: calls.append("gone")
    hook.fire()
    assert calls == ["gone"]


class _StoppingTransport:
    def __init__(self, tls: bool) -> None:
        self.tls = tls
        self.how: str | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return object() if name == "sslcontext" and self.tls else default

    def abort(self) -> None:
        self.how = "abort"

    def close(self) -> None:
        self.how = "close"


def test_a_stop_drops_idle_tls_connections_and_closes_plain_ones() -> None:
    from gateway.http_protocol import GuardedHttpToolsProtocol

    for tls, expected in ((True, "abort"), (False, "close")):
        protocol = GuardedHttpToolsProtocol.__new__(GuardedHttpToolsProtocol)
        transport = _StoppingTransport(tls)
        protocol.transport = transport  # type: ignore[assignment]
        protocol.cycle = None  # type: ignore[assignment]  # idle: between requests, kept alive
        protocol.shutdown()
        assert transport.how == expected
