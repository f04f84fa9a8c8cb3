"""gateway/request_ids.py: ids that never repeat in a process, whatever id the client sent."""

from __future__ import annotations

from gateway.request_ids import RequestIds


def test_ids_never_repeat_and_differ_between_processes() -> None:
    ids = RequestIds()
    made = {ids.next_id() for _ in range(10_000)}
    assert len(made) == 10_000
    assert RequestIds().prefix != ids.prefix  # 48 random bits a process


def test_an_upstream_id_keeps_the_clients_id_and_is_unique_per_attempt() -> None:
    ids = RequestIds(prefix="p")
    assert ids.for_upstream("client-1") == "client-1-p1"
    assert ids.for_upstream("client-1") == "client-1-p2"
