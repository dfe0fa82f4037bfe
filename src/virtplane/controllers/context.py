"""What every controller gets: the store, the cache, host connections, settings.

Writes and events. A controller writes what it observed and decided (status, finalizers,
the durable intents under ``virtplane.io/``) with ``write``/``mutate``, which refuse to
touch spec, labels or user annotations (``Store.update_status``). The events a reconcile
records are kept until its next write and go into the same transaction: an event never
describes a change that did not happen, and a retried reconcile never repeats one. What is
left at the end of a reconcile (events about a driver action, with no write after it) is
written then; a reconcile that lost a write race drops them (``events_scope``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar, cast

from virtplane.controllers.scheduling import Promises
from virtplane.domain.ipam import Claim
from virtplane.domain.resources import EventType, Resource
from virtplane.metrics import PlaneMetrics
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.store.database import EventRecord, utcnow
from virtplane.store.errors import Conflict
from virtplane.store.group_commit import GroupCommit
from virtplane.store.settings import Settings
from virtplane.store.store import Store
from virtplane.store.writes import StatusWrite

R = TypeVar("R", bound=Resource)
S = TypeVar("S", bound=Resource)

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
    promised: Promises = field(default_factory=Promises)
    """Room placements took before their writes landed (``controllers.scheduling``)."""
    started_at: datetime = field(default_factory=utcnow)
    """When this process began to reconcile: a VM created before it, never placed, may still have
    a domain somewhere if the store was restored from a backup (``vm.steps.observe``)."""
    looked_for: set[str] = field(default_factory=set)
    """The uids of the unplaced VMs whose domain was looked for in the census since then."""
    census: dict[str, str] = field(default_factory=dict)
    """VM uid -> the host that had its domain when this process first listed that host's
    domains (``controllers.domain_survey``)."""
    surveyed: set[str] = field(default_factory=set)
    """The hosts whose domains were listed since this process last reached them."""
    guest_looks: dict[str, datetime] = field(default_factory=dict)
    """VM uid -> when the addresses its guest's agent reports were last read (``vm.guest``):
    in memory, so a refresh that finds nothing new writes nothing."""
    commits: GroupCommit = field(init=False)
    """The status writes of all reconciles, committed together (one transaction per turn of
    the event loop)."""

    def __post_init__(self) -> None:
        self.commits = GroupCommit(self.store, committed=self.cache.put)

    # ------------------------------------------------------------------ reads

    def held(self, cls: type[R], name: str) -> R | None:
        """The object a reconcile starts from: the cache's (it holds every write of this
        process before the writer resumes, and the feed's delivery of the others is what
        wakes a reconcile), else the store's. Shared with the cache: read it, never change it
        (``domain.base.copied`` makes the copy to change, where a change begins). One older
        than the store's (a change not yet delivered) loses its write's version check and is
        looked at again; a driver call comes only after such a write (the durable points)."""
        cached = self.cache.get(cls, name)
        return cached if cached is not None else self.store.find(cls, name)

    # ------------------------------------------------------------------ events

    def event(
        self, obj: Resource | tuple[str, str], reason: str, message: str, warning: bool = False
    ) -> None:
        """Record an event; inside a reconcile it is written with the reconcile's next write,
        so record it before the write it describes: whoever sees the change sees its event."""
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

    @contextlib.asynccontextmanager
    async def events_scope(self) -> AsyncIterator[None]:
        """One reconcile: its events go with its writes; leftovers are written at the end,
        unless the reconcile raised (a lost write race, an error: nothing it describes
        happened for sure)."""
        token = _pending.set([])
        try:
            yield
            leftover = self._take_events()
            if leftover:
                await self.commits.write(StatusWrite((), leftover))
        finally:
            _pending.reset(token)

    # ------------------------------------------------------------------ writes

    async def write(self, obj: R) -> R:
        """Write status (finalizers, system annotations) with a version check and the pending
        events; the cache takes the result at once. Committed with the other reconciles'
        writes of this turn of the loop (``commits``); durable when it returns."""
        [written] = await self.commits.write(StatusWrite((obj,), self._take_events()))
        return cast(R, written)  # the store hands it back as its own class

    async def write_together(self, first: R, second: S) -> tuple[R, S]:
        """``write`` of two objects in one transaction: both or neither."""
        a, b = await self.commits.write(StatusWrite((first, second), self._take_events()))
        return cast(R, a), cast(S, b)

    async def write_mutating(
        self, obj: R, cls: type[S], name: str, change: Callable[[S], None], attempts: int = 20
    ) -> tuple[R, S]:
        """``write`` of ``obj`` and, in the same transaction, ``change`` applied to the current
        ``name`` of ``cls``: a lost race on that one is tried again on a fresh read (as
        ``mutate``, with the same events); one on ``obj`` is the caller's, as ``write``'s."""
        events = self._take_events()
        for attempt in range(attempts):
            current = self.store.get(cls, name)
            change(current)
            try:
                a, b = await self.commits.write(StatusWrite((obj, current), events))
            except Conflict as lost:
                if (lost.kind, lost.name) != (cls.KIND, name) or attempt == attempts - 1:
                    raise
                continue
            return cast(R, a), cast(S, b)
        raise AssertionError("unreachable")

    def mutate(self, cls: type[R], name: str, change: Callable[[R], None]) -> R:
        """``Store.mutate`` (status-only, re-read on a lost race) with the pending events."""
        written = self.store.mutate(cls, name, change, events=self._take_events(), status_only=True)
        self.cache.put(written)
        return written

    def delete(self, cls: type[R], name: str) -> None:
        """``Store.delete``; the cache lets go of the object at once when its row is gone (a
        look before the feed delivers the deletion must not find it)."""
        if self.store.delete(cls, name):
            self.cache.gone(cls.KIND, name)

    def write_spec(self, obj: R, why: str) -> R:
        """The rare controller step that changes a spec, named at its call site by ``why``:
        a restore overwrites the VM's spec from its snapshot; a block migration moves a
        Volume to the target's pool. Everything else a controller writes is status."""
        assert why, "say why a controller changes a spec"
        written = self.store.update(obj, events=self._take_events())
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
        written = self.store.mutate(cls, name, change, events=self._take_events(), claims=claims)
        self.cache.put(written)
        return written
