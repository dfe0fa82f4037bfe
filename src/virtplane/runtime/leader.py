"""Leader election: of several replicas, one at a time runs a controller.

A lease is a row in the store's ``leases`` table: (name, holder, expires_at). A replica
takes it when it is free or expired and renews it every ``renew_every_s``; the check
and the write are one UPDATE, so two replicas can never both win (SQLite and
PostgreSQL alike). A leader that cannot renew steps down one renewal period *before*
its lease expires (``on_stop``), so there is a window in which nobody acts rather than
one in which two do; only after the expiry may another replica take over. Stopping
hands the lease over at once.

Times written to the lease come from ``clock`` (UTC, default: this machine's clock),
so replicas' clocks must agree to well within ``renew_every_s`` (NTP does).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from virtplane.store.database import utcnow
from virtplane.store.store import Store

log = logging.getLogger("virtplane.leader")

Callback = Callable[[], Awaitable[None] | None]


class LeaderElector:
    """Holds the lease ``name`` for ``holder_id`` while it can; see the module docstring.

    ``acquire_or_renew`` and ``release`` are single blocking attempts; ``run`` is the
    loop a replica runs, calling ``on_start`` when it becomes leader and ``on_stop``
    when it stops being one (lost lease, renewal failing for too long, or ``stop``).
    """

    def __init__(
        self,
        store: Store,
        name: str,
        holder_id: str,
        lease_s: float = 15.0,
        renew_every_s: float = 5.0,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if renew_every_s <= 0 or lease_s <= renew_every_s:
            raise ValueError(
                f"need 0 < renew_every_s < lease_s, got renew_every_s={renew_every_s!r}, lease_s={lease_s!r}"
            )
        self.store = store
        self.name = name
        self.holder_id = holder_id
        self.lease_s = lease_s
        self.renew_every_s = renew_every_s
        self._clock = clock
        # Until when this replica may act: one renewal period before the lease it last
        # wrote runs out. None while it holds no lease.
        self._act_until: datetime | None = None
        self._leading = False  # on_start was called and on_stop not yet
        self._said_following = False  # the log said this replica follows (said once per change)
        self._stop = asyncio.Event()
        self.attempts = 0
        """How many acquire/renew attempts have finished (succeeded, refused or failed)."""
        self.acquisitions = 0
        """How many times this replica became the leader (``on_start`` was called)."""

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the lease and may still act on it."""
        return self._act_until is not None and self._clock() < self._act_until

    def leader(self) -> str | None:
        """Who holds the lease now, as the store says (None: nobody)."""
        lease = self.store.lease(self.name)
        if lease is None or lease[1] < self._clock():
            return None
        return lease[0]

    def _seconds_left(self) -> float:
        if self._act_until is None:
            return 0.0
        return (self._act_until - self._clock()).total_seconds()

    # ------------------------------------------------------------------ single attempts

    def acquire_or_renew(self) -> bool:
        """One attempt to take or renew the lease; returns ``is_leader`` afterwards.

        A store error propagates and leaves the state as it was: the replica keeps
        acting until its deadline and no longer.
        """
        started = self._clock()
        self._apply(started, self._try(started))
        return self.is_leader

    def _try(self, started: datetime) -> bool:
        try:
            return self.store.try_acquire_lease(self.name, self.holder_id, started, self.lease_s)
        finally:
            self.attempts += 1

    def _apply(self, started: datetime, held: bool) -> None:
        if held:
            self._act_until = started + timedelta(seconds=self.lease_s - self.renew_every_s)
        else:
            self._act_until = None

    def release(self) -> None:
        """Stop acting and give the lease up, so another replica can take it at once."""
        self._act_until = None
        self.store.release_lease(self.name, self.holder_id)

    # ------------------------------------------------------------------ the loop

    def stop(self) -> None:
        """Ask ``run`` to step down, release the lease and return."""
        self._stop.set()

    async def run(self, on_start: Callback, on_stop: Callback) -> None:
        """Campaign and lead until ``stop`` (or cancellation); exceptions of the callbacks end it."""
        try:
            while not self._stop.is_set():
                await self._attempt()
                if self.is_leader and not self._leading:
                    self._leading = True
                    self.acquisitions += 1
                    self._said_following = False
                    log.info("%s: %s is now the leader", self.name, self.holder_id)
                    await _call(on_start)
                elif not self.is_leader and self._leading:
                    await self._step_down(on_stop, "lost the lease")
                if not self.is_leader and not self._said_following and self.attempts:
                    self._said_following = True
                    log.info(
                        "%s: %s is a follower and reconciles nothing; the leader is %s",
                        self.name,
                        self.holder_id,
                        await asyncio.to_thread(self.leader),
                    )
                await self._pause()
        finally:
            if self._leading:
                await self._step_down(on_stop, "stopping")
            if self.attempts:
                try:
                    await asyncio.wait_for(asyncio.to_thread(self.release), self.lease_s)
                except Exception:  # the lease then runs out by itself
                    log.warning("%s: could not release the lease", self.name, exc_info=True)

    async def _attempt(self) -> None:
        # A leader waits for the store no longer than it may act: a store that hangs
        # must not keep it acting past its deadline. The answer of an attempt given up
        # on is ignored (the next one renews a lease it may still have written).
        timeout = self._seconds_left() if self.is_leader else self.lease_s
        started = self._clock()
        try:
            held = await asyncio.wait_for(asyncio.to_thread(self._try, started), timeout)
        except Exception as e:
            log.warning("%s: could not renew or acquire the lease: %s", self.name, e or type(e).__name__)
            return
        self._apply(started, held)

    async def _step_down(self, on_stop: Callback, why: str) -> None:
        self._leading = False
        self._act_until = None
        log.info("%s: %s stops leading (%s)", self.name, self.holder_id, why)
        await _call(on_stop)

    async def _pause(self) -> None:
        wait = self.renew_every_s
        if self._act_until is not None:
            wait = max(min(wait, self._seconds_left()), 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), wait)


async def _call(callback: Callback) -> None:
    result = callback()
    if inspect.isawaitable(result):
        await result


__all__ = ["LeaderElector"]
