"""The batch state's claims, results and finalization, one test body over the memory twin and a real
Redis (the Lua scripts): a line is claimed by one caller at a time, reclaimed when its lease runs out,
recorded once, and a batch is finalized by exactly one caller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.batches.records import BatchDoc, FileObject, StoredBatch
from gateway.batches.redis_state import RedisBatchState
from gateway.batches.state import BatchState, MemoryBatchState

NOW = 1_800_000_000.0
LEASE_S = 60.0


@pytest.fixture(params=["memory", "redis"])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[BatchState]:
    made: BatchState
    if request.param == "memory":
        made = MemoryBatchState()
    else:
        made = RedisBatchState.from_url(request.getfixturevalue("redis_flushed"))
    yield made
    await made.close()


async def new_batch(state: BatchState, n: int, batch_id: str = "batch_1", tenant: str = "acme") -> str:
    doc = BatchDoc(
        id=batch_id,
        tenant=tenant,
        key_sha256=None,
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        created_at=int(NOW),
        expires_at=int(NOW) + 24 * 3600,
    )
    await state.create(StoredBatch(doc=doc, status="validating", total=n), [b"line %d" % i for i in range(n)])
    return batch_id


async def test_lines_are_claimed_once_in_order(state: BatchState) -> None:
    batch_id = await new_batch(state, 5)
    first = await state.claim(batch_id, NOW, LEASE_S, 2)
    second = await state.claim(batch_id, NOW, LEASE_S, 10)
    assert first == [(0, b"line 0"), (1, b"line 1")]
    assert [index for index, _ in second] == [2, 3, 4]
    assert await state.claim(batch_id, NOW, LEASE_S, 10) == []  # all leased
    stored = await state.get(batch_id)
    assert (
        stored is not None and stored.status == "in_progress" and stored.times["in_progress_at"] == int(NOW)
    )


async def test_claims_from_concurrent_callers_never_overlap(state: BatchState) -> None:
    batch_id = await new_batch(state, 40)
    claims = await asyncio.gather(*(state.claim(batch_id, NOW, LEASE_S, 3) for _ in range(20)))
    indices = [index for claim in claims for index, _ in claim]
    assert sorted(indices) == list(range(40))


async def test_a_line_whose_lease_ran_out_is_claimed_again_unless_recorded(state: BatchState) -> None:
    batch_id = await new_batch(state, 3)
    await state.claim(batch_id, NOW, LEASE_S, 3)  # a gateway that then died
    assert await state.record(batch_id, 1, b'{"r":1}', True)
    later = NOW + LEASE_S + 1
    assert [index for index, _ in await state.claim(batch_id, later, LEASE_S, 10)] == [0, 2]
    assert await state.claim(batch_id, later, LEASE_S, 10) == []


async def test_a_result_is_written_once(state: BatchState) -> None:
    batch_id = await new_batch(state, 2)
    await state.claim(batch_id, NOW, LEASE_S, 2)
    assert await state.record(batch_id, 0, b"first", True)
    assert not await state.record(batch_id, 0, b"second", False)
    stored = await state.get(batch_id)
    assert stored is not None and (stored.completed, stored.failed) == (1, 0)
    _, results = await state.lines_and_results(batch_id)
    assert results == {0: b"first"}


async def test_a_released_line_waits_until_its_time(state: BatchState) -> None:
    batch_id = await new_batch(state, 1)
    await state.claim(batch_id, NOW, LEASE_S, 1)
    await state.release(batch_id, 0, NOW + 5)  # a 429: run it again in 5 s
    assert await state.claim(batch_id, NOW + 4, LEASE_S, 1) == []
    assert await state.claim(batch_id, NOW + 5, LEASE_S, 1) == [(0, b"line 0")]


async def test_finalization_is_won_once_and_finished_once(state: BatchState) -> None:
    batch_id = await new_batch(state, 2)
    await state.claim(batch_id, NOW, LEASE_S, 2)
    assert await state.begin_finalizing(batch_id, NOW, LEASE_S, False) is None  # lines outstanding
    await state.record(batch_id, 0, b"a", True)
    await state.record(batch_id, 1, b"b", False)
    won = await asyncio.gather(*(state.begin_finalizing(batch_id, NOW, LEASE_S, False) for _ in range(5)))
    assert won.count("completed") == 1 and won.count(None) == 4
    assert not await state.record(batch_id, 1, b"late", True)  # finalizing: no more results
    # a finalizer silent for a lease is taken over; the first to finish wins
    assert await state.begin_finalizing(batch_id, NOW + LEASE_S + 1, LEASE_S, False) == "completed"
    assert await state.finish(batch_id, "completed", NOW, "file-out", "file-err")
    assert not await state.finish(batch_id, "completed", NOW, "file-x", None)
    stored = await state.get(batch_id)
    assert stored is not None and stored.status == "completed"
    assert (stored.output_file_id, stored.error_file_id) == ("file-out", "file-err")
    assert stored.times["completed_at"] == int(NOW)


async def test_a_cancel_waits_for_the_lines_in_flight(state: BatchState) -> None:
    batch_id = await new_batch(state, 4)
    await state.claim(batch_id, NOW, LEASE_S, 2)
    assert await state.cancel(batch_id, NOW)
    assert not await state.cancel(batch_id, NOW)
    assert await state.claim(batch_id, NOW, LEASE_S, 2) == []  # nothing new is claimed
    assert await state.begin_finalizing(batch_id, NOW, LEASE_S, False) is None  # two in flight
    assert await state.record(batch_id, 0, b"a", True)  # a line in flight finishes
    assert await state.begin_finalizing(batch_id, NOW, LEASE_S, False) is None
    # the other's gateway died: past its lease the cancel completes
    assert await state.begin_finalizing(batch_id, NOW + LEASE_S + 1, LEASE_S, False) == "cancelled"


async def test_past_its_window_a_batch_expires(state: BatchState) -> None:
    batch_id = await new_batch(state, 3)
    await state.claim(batch_id, NOW, LEASE_S, 1)
    assert await state.begin_finalizing(batch_id, NOW, LEASE_S, True) == "expired"


async def test_active_batches_and_listing(state: BatchState) -> None:
    first = await new_batch(state, 1, "batch_a")
    second = await new_batch(state, 1, "batch_b")
    await new_batch(state, 1, "batch_c", tenant="globex")
    assert sorted(await state.active()) == ["batch_a", "batch_b", "batch_c"]
    await state.forget(first)
    assert sorted(await state.active()) == ["batch_b", "batch_c"]
    assert [b.doc.id for b in await state.list_batches("acme")] == [second, first]  # newest first
    assert await state.get("batch_missing") is None


async def test_files_are_per_tenant(state: BatchState) -> None:
    file = FileObject(id="file-1", bytes=3, created_at=int(NOW), filename="a.jsonl", purpose="batch")
    await state.put_file("acme", file)
    assert await state.get_file("acme", "file-1") == file
    assert await state.get_file("globex", "file-1") is None
    assert await state.list_files("acme") == [file] and await state.list_files("globex") == []
    assert not await state.delete_file("globex", "file-1")
    assert await state.delete_file("acme", "file-1")
    assert await state.get_file("acme", "file-1") is None
