"""What every controller gets: the store, the cache, host connections, settings.

Writes and events. A controller writes what it observed and decided (status, finalizers,
the durable intents under ``virtplane.io/``) with ``write``/``mutate``, which refuse to
touch spec, labels or user annotations (``Store.update_status``). The events a reconcile
records are kept until its next write and go into the same transaction: an event never
describes a change that did not happen, and a retried reconcile never repeats one. What is
left at the end of a reconcile (events about a driver action, with no write after it) rides
on the next write of any reconcile, or is written on its own after ``CARRY_EVENTS_S``; a
reconcile that lost a write race drops its own (``events_scope``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from virtplane.domain.ipam import Claim
from virtplane.domain.resources import EventType, Resource
from virtplane.metrics import PlaneMetrics
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.store.database import EventRecord, utcnow
from virtplane.store.settings import Settings
from virtplane.store.store import Store

R = TypeVar("R", bound=Resource)

log = logging.getLogger("virtplane.controllers")

CARRY_EVENTS_S = 0.05
"""How long the events a reconcile leaves (a driver action with no write after it: "Started")
wait for another reconcile's write to ride on before they are written on their own. Under
load one comes within milliseconds, and the events cost no transaction of their own."""

_pending: ContextVar[list[EventRecord] | None] = ContextVar("virtplane_pending_events", default=None)


@dataclass
class ControllerContext:
    store: Store
    cache: Cache
    hosts: HostConnections
    settings: Settings
    now: Callable[[], datetime] = field(default=utcnow)
    enqueue: Callable[[str, str], None] = field(default=lambda kind, name: None)
    """Wake another controller: (kind, name); wired by bootstrap. A write needs none: the
    watches (``controllers.watch``) map every change of the cache to whom it concerns."""
    metrics: PlaneMetrics = field(default_factory=PlaneMetrics)
    """Counters of what ends inside a reconcile; bootstrap registers them for /metrics."""
    _carried: list[EventRecord] = field(default_factory=list, init=False, repr=False)
    """Events that happened, left by reconciles that ended: the next write takes them."""
    _flush: asyncio.TimerHandle | None = field(default=None, init=False, repr=False)

    # ------------------------------------------------------------------ events

    def event(
        self, obj: Resource | tuple[str, str], reason: str, message: str, warning: bool = False
    ) -> None:
        """Record an event; inside a reconcile it is written with the reconcile's next write."""
        kind, name = (obj.KIND, obj.metadata.name) if isinstance(obj, Resource) else obj
        record = (kind, name, reason, message, EventType.WARNING if warning else EventType.NORMAL)
        pending = _pending.get()
        if pending is None:
            self.store.record_events([record])
        else:
            pending.append(record)

    @staticmethod
    def _take_events() -> list[EventRecord]:
        pending = _pending.get()
        if not pending:
            return []
        taken = list(pending)
        pending.clear()
        return taken

    @contextlib.contextmanager
    def events_scope(self) -> Iterator[None]:
        """One reconcile: its events go with its writes; leftovers are carried to the next
        write, unless the reconcile raised (a lost write race, an error: nothing it describes
        happened for sure)."""
        token = _pending.set([])
        try:
            yield
            leftover = self._take_events()
            if leftover:
                self._carry(leftover)
        finally:
            _pending.reset(token)

    def _carry(self, events: list[EventRecord]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop: nobody else will write soon
            self.store.record_events(events)
            return
        self._carried.extend(events)
        if self._flush is None:
            self._flush = loop.call_later(CARRY_EVENTS_S, self.flush_events)

    def flush_events(self) -> None:
        """Write the carried events on their own (no write came to take them; or stopping)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        carried, self._carried = self._carried, []
        if not carried:
            return
        try:
            self.store.record_events(carried)
        except Exception:  # the store is unreachable: they wait for the next write
            log.exception("%d events not written yet", len(carried))
            self._carried[:0] = carried

    @contextlib.contextmanager
    def _write_events(self) -> Iterator[list[EventRecord]]:
        """The events a write takes: the carried ones (first: they happened first), then the
        reconcile's own. A failed write puts the carried ones back; the reconcile's own are
        dropped with it."""
        carried, self._carried = self._carried, []
        try:
            yield carried + self._take_events()
        except BaseException:
            self._carried[:0] = carried
            raise

    # ------------------------------------------------------------------ writes

    def write(self, obj: R) -> R:
        """Write status (finalizers, system annotations) with a version check and the pending
        events, and take the result into the cache at once."""
        with self._write_events() as events:
            written = self.store.update_status(obj, events=events)
        self.cache.put(written)
        return written

    def mutate(self, cls: type[R], name: str, change: Callable[[R], None]) -> R:
        """``Store.mutate`` (status-only, re-read on a lost race) with the pending events."""
        with self._write_events() as events:
            written = self.store.mutate(cls, name, change, events=events, status_only=True)
        self.cache.put(written)
        return written

    def write_spec(self, obj: R, why: str) -> R:
        """The rare controller step that changes a spec, named at its call site by ``why``:
        a restore overwrites the VM's spec from its snapshot; a block migration moves a
        Volume to the target's pool. Everything else a controller writes is status."""
        assert why, "say why a controller changes a spec"
        with self._write_events() as events:
            written = self.store.update(obj, events=events)
        self.cache.put(written)
        return written

    def mutate_spec(
        self,
        cls: type[R],
        name: str,
        change: Callable[[R], None],
        why: str,
        claims: Callable[[R], Sequence[Claim]] | None = None,
    ) -> R:
        """``mutate`` that may change the spec; see ``write_spec``. ``claims``: what the changed
        object holds alone (a VM's MACs and addresses), written with it."""
        assert why, "say why a controller changes a spec"
        with self._write_events() as events:
            written = self.store.mutate(cls, name, change, events=events, claims=claims)
        self.cache.put(written)
        return written
