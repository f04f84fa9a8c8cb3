"""The fair queue's order: priority classes, weighted fair share among tenants, FIFO per tenant."""

from __future__ import annotations

from collections import Counter

from gateway.replicas.fair_queue import FairQueue


def drain(queue: FairQueue[str]) -> list[str]:
    order = []
    while (entry := queue.pop()) is not None:
        order.append(entry.item)
    return order


def test_one_tenant_is_first_come_first_served() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(5):
        queue.push(f"a{i}", "a")
    assert len(queue) == 5 and queue.num_queued("a") == 5
    assert drain(queue) == ["a0", "a1", "a2", "a3", "a4"]
    assert len(queue) == 0 and queue.num_queued("a") == 0 and queue.pop() is None


def test_a_late_tenant_goes_before_a_flooders_backlog() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.charge("a")  # a0 took the last free slot without waiting
    for i in range(1, 9):
        queue.push(f"a{i}", "a")
    for i in range(1, 5):
        queue.push(f"b{i}", "b")
    assert drain(queue) == ["b1", "a1", "b2", "a2", "b3", "a3", "b4", *(f"a{i}" for i in range(4, 9))]


def test_weights_share_the_turns() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(40):
        queue.push(f"a{i}", "a", weight=3.0)
        queue.push(f"b{i}", "b", weight=1.0)
    first = drain(queue)[:40]
    shares = Counter(item[0] for item in first)
    assert shares == {"a": 30, "b": 10}
    assert [item for item in first if item[0] == "a"] == [f"a{i}" for i in range(30)]  # FIFO within


def test_a_more_urgent_class_goes_first_whatever_the_share() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("batch-0", "a", priority=5)
    queue.push("batch-1", "b", priority=5)
    queue.push("urgent-0", "b", priority=1, weight=0.1)
    queue.push("urgent-1", "a", priority=1)
    queue.push("normal", "c")
    assert drain(queue) == ["normal", "urgent-0", "urgent-1", "batch-0", "batch-1"]


def test_a_removed_entry_is_skipped_and_its_share_handed_back() -> None:
    queue: FairQueue[str] = FairQueue()
    a0 = queue.push("a0", "a")
    a1 = queue.push("a1", "a")
    queue.remove(a1)  # its tenant's latest: the tag goes back
    queue.remove(a1)  # a second time is a no-op
    assert queue.num_queued("a") == 1
    queue.push("b0", "b")
    queue.push("a2", "a")
    assert drain(queue) == ["a0", "b0", "a2"]
    queue.remove(a0)  # popped already: a no-op
    assert len(queue) == 0


def test_a_requeued_entry_heads_its_class_again() -> None:
    queue: FairQueue[str] = FairQueue()
    for name in ("a0", "b0", "a1"):
        queue.push(name, name[0])
    first = queue.pop()
    assert first is not None and first.item == "a0"
    queue.requeue(first)
    queue.requeue(first)  # queued already: a no-op
    assert drain(queue) == ["a0", "b0", "a1"]


def test_many_removals_compact_the_heap() -> None:
    queue: FairQueue[str] = FairQueue()
    keep = queue.push("keep", "k")
    gone = [queue.push(f"x{i}", "x") for i in range(100)]
    for entry in gone:
        queue.remove(entry)
    assert len(queue) == 1 and queue.num_queued("x") == 0
    assert len(queue._classes[0].heap) < 50  # rebuilt, not 101 entries long
    assert queue.pop() is keep


def test_an_emptied_queue_starts_afresh() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(50):
        queue.push(f"t{i}", f"tenant-{i}", priority=i % 3)
    drain(queue)
    assert queue._classes == {}  # the busy period is over: no tenant is held back for it
    for i in range(5):
        queue.push(f"a{i}", "a")
    queue.push("b0", "b")
    assert drain(queue)[:2] == ["a0", "b0"]


def test_charges_without_waiters_keep_only_tags_still_ahead() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(500):
        queue.charge(f"tenant-{i}")
    assert len(queue._classes[0].finish) <= 65
    queue.charge("a")
    queue.charge("a")  # a holds two slots when the pool saturates
    queue.push("a-late", "a")
    queue.push("b-late", "b")
    assert drain(queue) == ["b-late", "a-late"]


def test_a_requeued_entry_leads_a_class_that_started_afresh() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.charge("a")
    queue.charge("a")
    entry = queue.push("a2", "a")
    popped = queue.pop()
    assert popped is entry and queue._classes == {}
    queue.requeue(entry)  # its slot was taken: back, ahead of anyone who came meanwhile
    queue.push("b0", "b")
    assert drain(queue) == ["a2", "b0"]


def test_peek_shows_what_pop_takes_next_and_leaves_it_queued() -> None:
    queue: FairQueue[str] = FairQueue()
    assert queue.peek() is None
    late = queue.push("batch", "a", priority=9)
    first = queue.push("chat", "b")
    queue.remove(first)  # a removed entry is skipped by peek as by pop
    head = queue.peek()
    assert head is late and head.is_queued and len(queue) == 1
    popped = queue.pop()
    assert popped is late and queue.peek() is None
