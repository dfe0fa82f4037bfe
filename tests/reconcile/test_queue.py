import asyncio
import itertools
import random

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from virtplane.reconcile.clock import FakeClock, MonotonicClock
from virtplane.reconcile.queue import DEFAULT_FAIRNESS, Priority, QueueShutDown, WorkQueue
from virtplane.reconcile.ratelimit import ItemBackoff
from virtplane.reconcile.types import Request


async def settle() -> None:
    """Let every task that can make progress without time passing do so."""
    for _ in range(20):
        await asyncio.sleep(0)


async def try_get(queue: WorkQueue[str]) -> str | None:
    """Return a key if one is ready right now, else None (and leave the queue untouched)."""
    task = asyncio.create_task(queue.get())
    await settle()
    if task.done():
        return task.result()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return None


async def finished(task: "asyncio.Task[str]") -> str:
    """The task's result, failing (rather than hanging) if it cannot finish without time passing."""
    await settle()
    assert task.done(), "expected the waiting get() to have returned"
    return task.result()


def make_queue(
    clock: FakeClock | None = None, backoff: ItemBackoff | None = None, fairness: int = DEFAULT_FAIRNESS
) -> WorkQueue[str]:
    return WorkQueue(clock=clock or FakeClock(), backoff=backoff, fairness=fairness)


async def test_re_adding_a_queued_key_merges_it() -> None:
    queue = make_queue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert {await queue.get(), await queue.get()} == {"a", "b"}
    assert len(queue) == 0
    assert await try_get(queue) is None


async def test_earliest_ready_time_wins() -> None:
    clock = FakeClock(start=100.0)
    queue = make_queue(clock)
    queue.add_after("a", 10.0)
    queue.add_after("a", 5.0)
    assert queue.ready_at("a") == 105.0
    queue.add_after("a", 20.0)
    assert queue.ready_at("a") == 105.0
    assert len(queue) == 1
    queue.add("a")
    assert queue.ready_at("a") == 100.0
    assert await queue.get() == "a"
    assert len(queue) == 0


async def test_get_waits_for_the_fake_clock_to_reach_the_ready_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 5.0)
    waiter = asyncio.create_task(queue.get())
    await settle()
    assert not waiter.done()
    clock.advance(4.9)
    await settle()
    assert not waiter.done()
    clock.advance(0.1)
    assert await finished(waiter) == "a"


async def test_a_sooner_key_added_while_waiting_is_handed_out_first() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("late", 60.0)
    waiter = asyncio.create_task(queue.get())
    await settle()
    queue.add("now")
    assert await finished(waiter) == "now"


async def test_keys_come_out_in_ready_order_and_fifo_among_equals() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("c", 3.0)
    queue.add_after("a", 1.0)
    queue.add("x")
    queue.add("y")
    queue.add_after("b", 2.0)
    clock.advance(10.0)
    assert [await queue.get() for _ in range(5)] == ["x", "y", "a", "b", "c"]


async def test_negative_delay_means_now() -> None:
    clock = FakeClock(start=7.0)
    queue = make_queue(clock)
    queue.add_after("a", -3.0)
    assert queue.ready_at("a") == 7.0


async def test_key_added_while_processing_is_held_until_done_then_requeued() -> None:
    queue = make_queue()
    queue.add("a")
    assert await queue.get() == "a"
    assert queue.is_processing("a")
    queue.add("a")
    assert len(queue) == 1
    assert "a" in queue
    second_worker = asyncio.create_task(queue.get())
    await settle()
    assert not second_worker.done(), "a key being processed must not go to a second worker"
    queue.done("a")
    assert await finished(second_worker) == "a"
    assert queue.is_processing("a")


async def test_dirty_key_keeps_its_earliest_ready_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    await queue.get()
    queue.add_after("a", 10.0)
    queue.add_after("a", 3.0)
    queue.add_after("a", 8.0)
    assert queue.ready_at("a") == 3.0
    clock.advance(1.0)
    queue.done("a")
    assert queue.ready_at("a") == 3.0
    assert await try_get(queue) is None
    clock.advance(2.0)
    assert await queue.get() == "a"


async def test_done_without_re_add_leaves_the_key_out() -> None:
    queue = make_queue()
    queue.add("a")
    await queue.get()
    queue.done("a")
    queue.done("a")  # a second done is harmless
    queue.done("never-handed-out")
    assert len(queue) == 0
    assert not queue.is_processing("a")
    assert queue.processing_count == 0


async def test_other_keys_flow_while_one_is_processing() -> None:
    queue = make_queue()
    queue.add("a")
    await queue.get()
    queue.add("a")
    queue.add("b")
    assert await queue.get() == "b"
    assert queue.processing_count == 2


async def test_rate_limited_add_backs_off_and_forget_resets() -> None:
    clock = FakeClock()
    queue = make_queue(clock, ItemBackoff(base=1.0, cap=4.0))
    ready_times = []
    for _ in range(4):
        queue.add_rate_limited("a")
        ready_times.append(queue.ready_at("a"))
        clock.advance(10.0)
        assert await queue.get() == "a"
        queue.done("a")
    assert ready_times == [1.0, 12.0, 24.0, 34.0]  # delays 1, 2, 4, then capped at 4
    assert queue.num_requeues("a") == 4
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    assert queue.ready_at("a") == clock.now() + 1.0


async def test_shutdown_wakes_waiters_and_rejects_further_gets_and_adds() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("later", 100.0)
    waiters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.shutdown()
    for waiter in waiters:
        with pytest.raises(QueueShutDown):
            await waiter
    with pytest.raises(QueueShutDown):
        await queue.get()
    queue.add("ignored")
    assert "ignored" not in queue
    assert queue.shutting_down


async def test_shutdown_does_not_requeue_dirty_keys() -> None:
    queue = make_queue()
    queue.add("a")
    await queue.get()
    queue.add("a")
    queue.shutdown()
    queue.done("a")
    assert not queue.is_processing("a")
    with pytest.raises(QueueShutDown):
        await queue.get()


async def test_real_clock_waits_out_a_short_delay() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=MonotonicClock())
    queue.add_after("a", 0.002)
    assert await queue.get() == "a"


class CountingClock(MonotonicClock):
    """Real time, counting its reads: each waiter that wakes reads it."""

    def __init__(self) -> None:
        self.reads = 0

    def now(self) -> float:
        self.reads += 1
        return super().now()


async def reads_to_hand_out_one_key(idle_workers: int) -> int:
    clock = CountingClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    waiters = [asyncio.create_task(queue.get()) for _ in range(idle_workers)]
    await settle()
    clock.reads = 0
    queue.add("a")
    await settle()
    assert sum(waiter.done() for waiter in waiters) == 1
    queue.shutdown()
    await asyncio.gather(*waiters, return_exceptions=True)
    return clock.reads


async def test_a_ready_key_wakes_one_idle_worker_not_all_of_them() -> None:
    """The work of handing out a key does not grow with the workers waiting (64 of the VM
    controller's, most of them idle on a quiet fleet)."""
    assert await reads_to_hand_out_one_key(64) == await reads_to_hand_out_one_key(2)


async def test_keys_ready_at_once_reach_as_many_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=MonotonicClock())
    waiters = [asyncio.create_task(queue.get()) for _ in range(5)]
    await settle()
    for key in "abcde":
        queue.add(key)
    assert sorted(await asyncio.wait_for(asyncio.gather(*waiters), 1.0)) == list("abcde")


async def test_delayed_keys_due_together_reach_idle_workers_by_the_one_timer() -> None:
    await delayed_keys_due_together()


def test_the_timer_works_on_uvloop_the_servers_loop() -> None:
    """uvloop's ``call_later`` of 0 s returns a plain handle, without ``when()``: a queue that
    asked a timer for it lost all of a controller's workers at the server's start."""

    async def scenario() -> None:
        for _ in range(20):
            await delayed_keys_due_together()
            await delayed_keys_due_together(first_delay=0.0005)  # under 1 ms: a plain handle

    uvloop.run(scenario())


async def delayed_keys_due_together(first_delay: float = 0.002) -> None:
    queue: WorkQueue[str] = WorkQueue(clock=MonotonicClock())
    waiters = [asyncio.create_task(queue.get()) for _ in range(4)]
    await settle()
    queue.add_after("late", 0.004)
    for key in "abc":
        queue.add_after(key, first_delay)
    assert sorted(await asyncio.wait_for(asyncio.gather(*waiters), 1.0)) == ["a", "b", "c", "late"]


async def test_a_woken_worker_cancelled_before_it_looks_passes_the_key_on() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=MonotonicClock())
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("a")  # wakes ``first``, which is cancelled before it runs
    first.cancel()
    assert await asyncio.wait_for(second, 1.0) == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_fake_clock_moving_past_several_keys_hands_out_each() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    waiters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    for key in "xyz":
        queue.add_after(key, 5.0)
    await settle()
    assert not any(waiter.done() for waiter in waiters)
    clock.advance(5.0)
    assert sorted(await asyncio.wait_for(asyncio.gather(*waiters), 1.0)) == list("xyz")


async def test_hundred_thousand_keys_are_each_drained_once_in_ready_order() -> None:
    clock = FakeClock()
    queue: WorkQueue[Request] = WorkQueue(clock=clock)
    rng = random.Random(1234)
    keys = [Request("vm", f"vm-{i}") for i in range(100_000)]
    expected_ready: dict[Request, float] = {}
    for key in keys:
        delay = rng.uniform(0.0, 1000.0)
        queue.add_after(key, delay)
        expected_ready[key] = delay
    # Pull a third of them earlier (leaving stale heap entries behind) and push some later (no-ops).
    for key in rng.sample(keys, 33_000):
        earlier = expected_ready[key] * rng.random()
        queue.add_after(key, earlier)
        expected_ready[key] = earlier
    for key in rng.sample(keys, 10_000):
        queue.add_after(key, expected_ready[key] + 5.0)
    assert len(queue) == 100_000

    assert all(queue.ready_at(key) == expected_ready[key] for key in keys)
    clock.advance(1000.0)
    drained: list[Request] = []
    while len(queue):
        key = await queue.get()
        queue.done(key)
        drained.append(key)

    assert len(drained) == 100_000
    assert set(drained) == set(keys)
    ready_sequence = [expected_ready[key] for key in drained]
    assert ready_sequence == sorted(ready_sequence)
    assert queue.processing_count == 0


# --- Priorities: event-woken keys before resync keys, without starving them ---


async def test_an_event_key_is_handed_out_before_earlier_resync_keys() -> None:
    queue = make_queue()
    for name in ("r1", "r2", "r3"):
        queue.add(name, Priority.RESYNC)
    queue.add("crashed")
    assert await queue.get() == "crashed"
    assert [await queue.get() for _ in range(3)] == ["r1", "r2", "r3"]


async def test_a_resync_key_ready_now_goes_before_an_event_key_not_yet_due() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("poll", 1.0)
    queue.add("resync", Priority.RESYNC)
    assert await queue.get() == "resync"
    assert await try_get(queue) is None
    clock.advance(1.0)
    assert await queue.get() == "poll"


async def test_an_event_upgrades_a_queued_resync_key_and_a_resync_never_downgrades() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a", Priority.RESYNC)
    queue.add_after("a", 5.0)  # a later event still makes the earlier look an event look
    assert (queue.ready_at("a"), queue.priority("a")) == (0.0, Priority.EVENT)
    queue.add_after("b", 5.0)
    queue.add("b", Priority.RESYNC)  # the resync brings it forward, the event keeps its rank
    assert (queue.ready_at("b"), queue.priority("b")) == (0.0, Priority.EVENT)
    queue.add("c", Priority.RESYNC)
    queue.add("c", Priority.RESYNC)
    assert queue.priority("c") is Priority.RESYNC
    assert len(queue) == 3


async def test_a_key_parked_while_processing_keeps_the_higher_priority() -> None:
    queue = make_queue()
    queue.add("a", Priority.RESYNC)
    assert await queue.get() == "a"
    queue.add("a", Priority.RESYNC)
    queue.add("a")
    queue.add("a", Priority.RESYNC)
    assert queue.priority("a") is Priority.EVENT
    queue.add("r", Priority.RESYNC)
    queue.done("a")
    assert await queue.get() == "a"


async def test_a_stream_of_events_lets_a_ready_resync_key_through_after_fairness_events() -> None:
    queue = make_queue(fairness=3)
    queue.add("resync", Priority.RESYNC)
    handed_out = []
    for index in range(8):
        queue.add(f"e{index}")
        key = await queue.get()
        queue.done(key)
        handed_out.append(key)
        if key == "resync":
            break
    assert handed_out == ["e0", "e1", "e2", "resync"]


async def test_events_alone_do_not_use_up_the_fairness_of_a_later_resync_key() -> None:
    queue = make_queue(fairness=2)
    for index in range(5):
        queue.add(f"e{index}")
    assert [await queue.get() for _ in range(3)] == ["e0", "e1", "e2"]
    queue.add("resync", Priority.RESYNC)
    assert [await queue.get() for _ in range(3)] == ["e3", "e4", "resync"]


def test_fairness_must_be_positive() -> None:
    with pytest.raises(ValueError, match="fairness"):
        WorkQueue(clock=FakeClock(), fairness=0)


_priorities = st.sampled_from(list(Priority))


@settings(max_examples=100, deadline=None)
@given(
    resync_keys=st.integers(min_value=1, max_value=20),
    fairness=st.integers(min_value=1, max_value=10),
    events_per_get=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=40),
)
def test_no_resync_key_starves_under_any_stream_of_events(
    resync_keys: int, fairness: int, events_per_get: list[int]
) -> None:
    """However many events keep arriving, the n-th ready resync key is handed out within
    n x (fairness + 1) gets."""
    asyncio.run(_run_starvation(resync_keys, fairness, events_per_get))


async def _run_starvation(resync_keys: int, fairness: int, events_per_get: list[int]) -> None:
    queue = make_queue(fairness=fairness)
    waiting = [f"r{index}" for index in range(resync_keys)]
    for key in waiting:
        queue.add(key, Priority.RESYNC)
    bound = resync_keys * (fairness + 1)
    event_counter = itertools.count()
    for gets in range(1, bound + 1):
        # Never run out of events: the worst case for the resync keys.
        for _ in range(events_per_get[gets % len(events_per_get)] + 1):
            queue.add(f"e{next(event_counter)}")
        key = await queue.get()
        queue.done(key)
        if key in waiting:
            assert key == waiting.pop(0), "resync keys keep their order"
            assert gets <= (resync_keys - len(waiting)) * (fairness + 1)
        if not waiting:
            return
    raise AssertionError(f"resync keys {waiting} still waiting after {bound} gets")


# --- Model check: the queue against a plain dictionary model over random operations ---

_keys = st.sampled_from(["a", "b", "c", "d"])
# Each operation is (name, key, seconds); unused fields are blank.
Operation = tuple[str, str, float]
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), _keys, st.sampled_from([0.0, 1.0, 2.0, 5.0])),
        st.tuples(st.just("resync"), _keys, st.sampled_from([0.0, 1.0])),
        st.tuples(st.just("advance"), st.just(""), st.sampled_from([0.5, 1.0, 3.0])),
        st.tuples(st.just("get"), st.just(""), st.just(0.0)),
        st.tuples(st.just("done"), _keys, st.just(0.0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_operations, st.integers(min_value=1, max_value=3))
def test_queue_matches_a_simple_model(operations: list[Operation], fairness: int) -> None:
    asyncio.run(_run_model(operations, fairness))


async def _run_model(operations: list[Operation], fairness: int) -> None:
    """The model: each queued key has (ready time, priority); a get hands out the earliest
    ready key of the higher priority, unless ``fairness`` event keys went out in a row while
    a resync key was ready; a key is never handed out while it is processing."""
    clock = FakeClock()
    queue = make_queue(clock, fairness=fairness)
    pending: dict[str, tuple[float, Priority]] = {}
    dirty: dict[str, tuple[float, Priority]] = {}
    processing: set[str] = set()
    streak = 0
    for name, key, seconds in operations:
        if name in ("add", "resync"):
            priority = Priority.EVENT if name == "add" else Priority.RESYNC
            queue.add_after(key, seconds, priority)
            ready_at = clock.now() + seconds
            target = dirty if key in processing else pending
            old_at, old_priority = target.get(key, (ready_at, priority))
            target[key] = (min(ready_at, old_at), max(priority, old_priority))
        elif name == "advance":
            clock.advance(seconds)
        elif name == "get":
            got = await try_get(queue)
            ready = {k: entry for k, entry in pending.items() if entry[0] <= clock.now()}
            if not ready:
                assert got is None
                continue
            assert got is not None
            assert got not in processing
            events = [at for at, p in ready.values() if p is Priority.EVENT]
            resyncs = [at for at, p in ready.values() if p is Priority.RESYNC]
            if events and not (resyncs and streak >= fairness):
                assert pending[got] == (min(events), Priority.EVENT)
                streak = streak + 1 if resyncs else 0
            else:
                assert pending[got] == (min(resyncs), Priority.RESYNC)
                streak = 0
            del pending[got]
            processing.add(got)
        else:
            queue.done(key)
            if key in processing:
                processing.remove(key)
                if key in dirty:
                    pending[key] = dirty.pop(key)
        assert len(queue) == len(pending) + len(dirty)
        for k in ["a", "b", "c", "d"]:
            entry = pending.get(k, dirty.get(k))
            assert queue.ready_at(k) == (entry[0] if entry else None)
            assert queue.priority(k) == (entry[1] if entry else None)
            assert queue.is_processing(k) == (k in processing)
