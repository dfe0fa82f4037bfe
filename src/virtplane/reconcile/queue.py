"""An asyncio work queue that owns dedupe, per-key exclusivity and backoff.

Every key is in at most one of three places:

- *pending*: waiting for its ready time, held in a heap;
- *processing*: handed out by ``get`` and not yet ``done``;
- *dirty*: added again while processing, parked until ``done`` puts it back in pending.

Re-adding a pending key merges it: the earliest ready time and the higher priority win.

Two priorities: keys woken by an event or a change (``Priority.EVENT``, the default)
are handed out before keys woken only by the periodic resync or the start-up listing
(``Priority.RESYNC``), so a crashed VM does not wait behind a hundred resync keys and a
cold start sees its first VMs boot before it has started the last. No key starves:
while a resync key is ready, at most ``fairness`` event keys are handed out in a row
before it. Within a priority, keys come out in ready order, FIFO among equals.

Each priority has its own heap with lazy deletion: an entry whose (ready time,
sequence, priority) no longer matches the key's current one is skipped when it
reaches the top, and the heaps are rebuilt when stale entries outnumber live ones.

A key that becomes ready wakes one waiting worker, not all of them (asyncio.Queue's
getters; client-go's ``cond.Signal``): a worker that takes a key while another is ready
wakes the next, and one timer, to the earliest ready time, wakes a worker when a
delayed key comes due. With 64 idle workers, waking them all cost every key 64 task
steps, most of them only to find the key taken.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from enum import IntEnum
from typing import Generic, TypeVar

from virtplane.reconcile.clock import Clock, MonotonicClock, ObservableClock
from virtplane.reconcile.ratelimit import ItemBackoff

K = TypeVar("K", bound=Hashable)

# Rebuild the heap once it holds this many more entries than live keys (and twice as many).
_COMPACT_SLACK = 1024


# Event keys handed out in a row, while a resync key is ready, before that resync key.
DEFAULT_FAIRNESS = 8


class Priority(IntEnum):
    """Why a key was added; a higher priority is handed out first."""

    RESYNC = 0  # only the periodic resync or the start-up listing: nothing is known to have changed
    EVENT = 1  # a change, a driver event, a requeue the reconciler asked for


class QueueShutDown(Exception):
    """Raised by ``WorkQueue.get`` once the queue is shut down."""


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        clock: Clock | None = None,
        backoff: ItemBackoff | None = None,
        fairness: int = DEFAULT_FAIRNESS,
    ) -> None:
        if fairness < 1:
            raise ValueError(f"fairness must be at least 1, got {fairness}")
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self.backoff = backoff if backoff is not None else ItemBackoff()
        self._fairness = fairness
        self._pending: dict[K, tuple[float, int, Priority]] = {}
        self._heaps: dict[Priority, list[tuple[float, int, K]]] = {p: [] for p in Priority}
        # The sequence breaks ties between equal ready times (FIFO) and keeps keys out of comparisons.
        self._sequence = itertools.count()
        self._processing: set[K] = set()
        self._dirty: dict[K, tuple[float, Priority]] = {}
        # Event keys handed out in a row while a resync key was ready.
        self._event_streak = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # Wakes a waiter when a delayed key is due (at ``_timer_due`` on the clock). A handle,
        # not a TimerHandle: uvloop's ``call_later`` of 0 s returns a plain one.
        self._timer: asyncio.Handle | None = None
        self._timer_due = math.inf
        self._shut_down = False
        # Fake time never passes on its own, so wait for its announcements instead of real timeouts.
        self._unsubscribe: Callable[[], None] | None = None
        self._timeouts_follow_real_time = True
        if isinstance(self._clock, ObservableClock):
            self._unsubscribe = self._clock.subscribe(self._wake_one)
            self._timeouts_follow_real_time = False

    def add(self, key: K, priority: Priority = Priority.EVENT) -> None:
        """Make ``key`` ready now."""
        self.add_after(key, 0.0, priority)

    def add_after(self, key: K, delay: float, priority: Priority = Priority.EVENT) -> None:
        """Make ``key`` ready after ``delay`` seconds, unless it is already due sooner.

        A key already queued keeps the earlier of the two ready times and the higher of
        the two priorities: one look at it answers both wakes (level-triggered).
        """
        if self._shut_down:
            return
        ready_at = self._clock.now() + max(delay, 0.0)
        if key in self._processing:
            parked_at, parked_priority = self._dirty.get(key, (math.inf, Priority.RESYNC))
            self._dirty[key] = (min(ready_at, parked_at), max(priority, parked_priority))
            return
        current = self._pending.get(key)
        if current is not None:
            if current[0] <= ready_at and current[2] >= priority:
                return
            ready_at, priority = min(ready_at, current[0]), max(priority, current[2])
        self._push(key, ready_at, priority)

    def add_rate_limited(self, key: K) -> None:
        """Requeue ``key`` after its next backoff delay (which also counts one more failure)."""
        self.add_after(key, self.backoff.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff; it does not remove the key from the queue."""
        self.backoff.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.backoff.failures(key)

    async def get(self) -> K:
        """Wait for the earliest ready key and mark it processing until ``done``."""
        while True:
            if self._shut_down:
                raise QueueShutDown
            key = self._take_ready()
            if key is not None:
                if self._earliest() <= self._clock.now():
                    self._wake_one()  # another key is ready: the next waiter takes it
                else:
                    self._arm_timer()  # the timer that woke this worker is spent
                return key
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self._arm_timer()
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled: the wake-up is another's
                raise
            finally:
                if not waiter.done() or waiter.cancelled():  # still in line, unless skipped since
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)

    def _take_ready(self) -> K | None:
        """The key to hand out now (event keys first, ``fairness`` of them in a row at most
        while a resync key is ready), or None if none is ready."""
        event_ready = self._is_ready(Priority.EVENT)
        resync_ready = self._is_ready(Priority.RESYNC)
        if event_ready and not (resync_ready and self._event_streak >= self._fairness):
            self._event_streak = self._event_streak + 1 if resync_ready else 0
            return self._take(Priority.EVENT)
        if resync_ready:
            self._event_streak = 0
            return self._take(Priority.RESYNC)
        return None

    def _is_ready(self, priority: Priority) -> bool:
        top = self._peek(priority)
        return top is not None and top[0] <= self._clock.now()

    def _earliest(self) -> float:
        """The earliest ready time of any queued key (inf: none)."""
        return min((top[0] for top in (self._peek(p) for p in Priority) if top), default=math.inf)

    def _wake_one(self) -> None:
        """Wake the longest-waiting worker (none waiting: the next ``get`` looks by itself)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _arm_timer(self) -> None:
        """Have a worker woken when the earliest delayed key comes due (real time only: a fake
        clock announces its moves), unless a timer already fires by then."""
        if not self._timeouts_follow_real_time or not self._waiters:
            return
        due = self._earliest()
        if due == math.inf or (self._timer is not None and self._timer_due <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        delay = max(self._timer_due - self._clock.now(), 0.0)
        self._timer = self._waiters[0].get_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._wake_one()

    def done(self, key: K) -> None:
        """Release ``key``; if it was added meanwhile, queue it again with that ready time."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        parked = self._dirty.pop(key, None)
        if parked is not None and not self._shut_down:
            self._push(key, *parked)

    def shutdown(self) -> None:
        """Wake every waiter; ``get`` raises ``QueueShutDown`` from now on and adds are ignored."""
        self._shut_down = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiters:
            self._wake_one()

    @property
    def shutting_down(self) -> bool:
        return self._shut_down

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    @property
    def processing_count(self) -> int:
        return len(self._processing)

    def ready_at(self, key: K) -> float | None:
        """When ``key`` becomes ready (for a dirty key: once it is done), or None if not queued."""
        entry = self._pending.get(key) or self._dirty.get(key)
        return entry[0] if entry is not None else None

    def priority(self, key: K) -> Priority | None:
        """The priority ``key`` will be handed out with, or None if not queued."""
        entry = self._pending.get(key) or self._dirty.get(key)
        return entry[-1] if entry is not None else None

    def __len__(self) -> int:
        """Distinct keys waiting to be handed out, including those parked behind their own processing."""
        return len(self._pending) + len(self._dirty)

    def __contains__(self, key: object) -> bool:
        return key in self._pending or key in self._dirty

    def _push(self, key: K, ready_at: float, priority: Priority) -> None:
        sequence = next(self._sequence)
        self._pending[key] = (ready_at, sequence, priority)
        heapq.heappush(self._heaps[priority], (ready_at, sequence, key))
        if sum(map(len, self._heaps.values())) > 2 * len(self._pending) + _COMPACT_SLACK:
            self._compact()
        if ready_at <= self._clock.now():
            self._wake_one()
        else:
            self._arm_timer()

    def _compact(self) -> None:
        """Rebuild the heaps from the live entries only."""
        self._heaps = {p: [] for p in Priority}
        for key, (ready_at, sequence, priority) in self._pending.items():
            self._heaps[priority].append((ready_at, sequence, key))
        for heap in self._heaps.values():
            heapq.heapify(heap)

    def _peek(self, priority: Priority) -> tuple[float, int, K] | None:
        """The earliest live entry of ``priority``'s heap, dropping stale ones on the way."""
        heap = self._heaps[priority]
        while heap:
            ready_at, sequence, key = heap[0]
            if self._pending.get(key) == (ready_at, sequence, priority):
                return heap[0]
            heapq.heappop(heap)
        return None

    def _take(self, priority: Priority) -> K:
        """Hand out the top of ``priority``'s heap (``_peek`` has just cleaned it)."""
        key = heapq.heappop(self._heaps[priority])[2]
        del self._pending[key]
        self._processing.add(key)
        return key


__all__ = ["DEFAULT_FAIRNESS", "Priority", "QueueShutDown", "WorkQueue"]
