"""An asyncio work queue that owns dedupe, per-key exclusivity and backoff.

Every key is in at most one of three places:

- *pending*: waiting for its ready time, held in a heap;
- *processing*: handed out by ``get`` and not yet ``done``;
- *dirty*: added again while processing, parked until ``done`` puts it back in pending.

Re-adding a pending key merges it and the earliest ready time wins. The heap uses
lazy deletion: an entry whose (ready time, sequence) no longer matches the key's
current one is skipped when it reaches the top, and the heap is rebuilt when such
stale entries outnumber live ones. Waiting uses one ``asyncio.Event`` for the whole
queue and a timeout to the earliest ready time, never a timer per key.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from virtplane.reconcile.clock import Clock, MonotonicClock, ObservableClock
from virtplane.reconcile.ratelimit import ItemBackoff

K = TypeVar("K", bound=Hashable)

# Rebuild the heap once it holds this many more entries than live keys (and twice as many).
_COMPACT_SLACK = 1024


class QueueShutDown(Exception):
    """Raised by ``WorkQueue.get`` once the queue is shut down."""


class WorkQueue(Generic[K]):
    def __init__(self, *, clock: Clock | None = None, backoff: ItemBackoff | None = None) -> None:
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self.backoff = backoff if backoff is not None else ItemBackoff()
        self._pending: dict[K, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, K]] = []
        # The sequence breaks ties between equal ready times (FIFO) and keeps keys out of comparisons.
        self._sequence = itertools.count()
        self._processing: set[K] = set()
        self._dirty: dict[K, float] = {}
        self._wakeup = asyncio.Event()
        self._shut_down = False
        # Fake time never passes on its own, so wait for its announcements instead of real timeouts.
        self._unsubscribe: Callable[[], None] | None = None
        self._timeouts_follow_real_time = True
        if isinstance(self._clock, ObservableClock):
            self._unsubscribe = self._clock.subscribe(self._wakeup.set)
            self._timeouts_follow_real_time = False

    def add(self, key: K) -> None:
        """Make ``key`` ready now."""
        self.add_after(key, 0.0)

    def add_after(self, key: K, delay: float) -> None:
        """Make ``key`` ready after ``delay`` seconds, unless it is already due sooner."""
        if self._shut_down:
            return
        ready_at = self._clock.now() + max(delay, 0.0)
        if key in self._processing:
            self._dirty[key] = min(ready_at, self._dirty.get(key, math.inf))
            return
        current = self._pending.get(key)
        if current is not None and current[0] <= ready_at:
            return
        self._push(key, ready_at)

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
            top = self._peek()
            now = self._clock.now()
            if top is not None and top[0] <= now:
                heapq.heappop(self._heap)
                key = top[2]
                del self._pending[key]
                self._processing.add(key)
                return key
            timeout: float | None = None
            if top is not None and self._timeouts_follow_real_time:
                timeout = top[0] - now
            # No await between the check above and this clear, so no add can slip in between.
            self._wakeup.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def done(self, key: K) -> None:
        """Release ``key``; if it was added meanwhile, queue it again with that ready time."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        ready_at = self._dirty.pop(key, None)
        if ready_at is not None and not self._shut_down:
            self._push(key, ready_at)

    def shutdown(self) -> None:
        """Wake every waiter; ``get`` raises ``QueueShutDown`` from now on and adds are ignored."""
        self._shut_down = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._wakeup.set()

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
        entry = self._pending.get(key)
        if entry is not None:
            return entry[0]
        return self._dirty.get(key)

    def __len__(self) -> int:
        """Distinct keys waiting to be handed out, including those parked behind their own processing."""
        return len(self._pending) + len(self._dirty)

    def __contains__(self, key: object) -> bool:
        return key in self._pending or key in self._dirty

    def _push(self, key: K, ready_at: float) -> None:
        sequence = next(self._sequence)
        self._pending[key] = (ready_at, sequence)
        heapq.heappush(self._heap, (ready_at, sequence, key))
        if len(self._heap) > 2 * len(self._pending) + _COMPACT_SLACK:
            self._heap = [(at, seq, k) for k, (at, seq) in self._pending.items()]
            heapq.heapify(self._heap)
        self._wakeup.set()

    def _peek(self) -> tuple[float, int, K] | None:
        """The earliest live heap entry, dropping stale ones on the way."""
        heap = self._heap
        while heap:
            ready_at, sequence, key = heap[0]
            if self._pending.get(key) == (ready_at, sequence):
                return heap[0]
            heapq.heappop(heap)
        return None


__all__ = ["QueueShutDown", "WorkQueue"]
