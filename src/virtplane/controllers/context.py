"""What every controller gets: the store, the cache, host connections, settings.

One read path and one write verb. A controller reads with ``read`` (the cache, the store
behind it) and writes what it observed and decided (status, finalizers, the durable intents
under ``virtplane.io/``) with ``write``, which refuses to touch spec, labels or user
annotations (``Store.update_status``) but where a ``Change`` says why; a write that must
land before a destructive step, at once, is a ``durable`` point, named. The events a reconcile
records are kept until its next write and go into the same transaction: an event never
describes a change that did not happen, and a retried reconcile never repeats one. What is
left at the end of a reconcile (events about a driver action, with no write after it) is
written then; a reconcile that lost a write race drops them (``events_scope``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from virtplane.controllers.scheduling import Promises
from virtplane.crashpoints import POINTS, crashpoint
from virtplane.domain.base import copied
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
    real_use: Callable[[], Mapping[str, float]] = field(default=lambda: {})
    """Each host's measured CPU use now (0 to 1), for placement when ``scheduler.real_use``
    asks for it (wired by bootstrap to the usage collector's figures)."""
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

    def read(self, cls: type[R], name: str, *, to_change: bool = False) -> R | None:
        """The one way a controller reads an object: the cache's (it holds every write of this
        process before the writer resumes, and the feed's delivery of the others is what wakes
        a reconcile), else the store's. The cache's is shared: read it, never change it;
        ``to_change`` hands back a copy to change and write. One older than the store's (a
        change not yet delivered) loses its write's version check and is looked at again; a
        driver call comes only after such a write (the durable points)."""
        cached = self.cache.get(cls, name)
        if cached is None:
            return self.store.find(cls, name)  # the store's is always a fresh copy
        return copied(cached) if to_change else cached

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

    def create(self, obj: R) -> R:
        """A new object a controller makes (a policy's backup): written at once through the
        store's own path (admission's defaults, claims), the cache takes it before the feed
        delivers it. ``AlreadyExists`` when one of its name was made before (by a look that a
        crash cut short: the name is deterministic, so it is the same one)."""
        created = self.store.create(obj)
        self.cache.put(created)
        return created

    @overload
    async def write(self, item: Removal, /) -> None: ...
    @overload
    async def write(self, item: R | Change[R], /) -> R: ...
    @overload
    async def write(self, first: R | Change[R], second: S | Change[S], /) -> tuple[R, S]: ...

    async def write(self, *items: Resource | Change[Any] | Removal) -> Any:
        """The common write: status (finalizers, system annotations) with a version check and
        the pending events, all items or none, committed with the other reconciles' writes of
        this turn of the loop (``commits``); durable when it returns, and the cache takes the
        result at once. An item is an object as changed (a lost race is the caller's: it looks
        again), a ``Change`` (applied to the current object, again on a lost race), or a
        ``Removal``; a Removal or a spec ``Change`` goes alone, at once, through the store."""
        if _alone_at_once(items):
            return self._now(items)
        events = self._take_events()
        for attempt in range(_ATTEMPTS):
            objs = self._objects(items, fresh=attempt > 0)
            try:
                written = await self.commits.write(StatusWrite(objs, events))
            except Conflict as lost:
                if not _ours(items, lost) or attempt == _ATTEMPTS - 1:
                    raise
                continue
            return written[0] if len(written) == 1 else tuple(written)
        raise AssertionError("unreachable")

    @overload
    async def durable(self, point: str, item: Removal, /) -> None: ...
    @overload
    async def durable(self, point: str, item: R | Change[R], /) -> R: ...
    @overload
    async def durable(self, point: str, first: R | Change[R], second: S | Change[S], /) -> tuple[R, S]: ...

    async def durable(self, point: str, *items: Resource | Change[Any] | Removal) -> Any:
        """A durable point (DESIGN.md §1: intent before a destructive step): ``write``, but in
        its own transaction, committed before this coroutine first yields, so nothing runs
        between the checks that came before it and its commit (a migration's intent after the
        target's room was checked); then the crash point ``point`` (``crashpoints.POINTS``),
        which a test arms to prove that what follows is resumed from what was written."""
        assert point in POINTS, f"name the durable point in crashpoints.POINTS: {point}"
        written = self._now(items)
        crashpoint(point)
        return written

    def _now(self, items: Sequence[Resource | Change[Any] | Removal]) -> Any:
        events = self._take_events()
        if len(items) == 1 and isinstance(items[0], Removal):
            gone = items[0]
            if events:
                self.store.record_events(events)
            if self.store.delete(gone.cls, gone.name):
                self.cache.gone(gone.cls.KIND, gone.name)  # a look before the feed's must not find it
            return None
        if len(items) == 1 and isinstance(items[0], Change) and items[0].spec_because:
            change = items[0]  # a spec is written through the store's own path, with its claims
            written = self.store.mutate(
                change.cls, change.name, change.apply, events=events, claims=change.claims
            )
            self.cache.put(written)
            return written
        for attempt in range(_ATTEMPTS):
            objs = self._objects(items, fresh=attempt > 0)
            [outcome] = self.store.write_each([StatusWrite(objs, events)])
            if isinstance(outcome, Conflict) and _ours(items, outcome) and attempt < _ATTEMPTS - 1:
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            for obj in outcome:
                self.cache.put(obj)
            return outcome[0] if len(outcome) == 1 else tuple(outcome)
        raise AssertionError("unreachable")

    def _objects(
        self, items: Sequence[Resource | Change[Any] | Removal], *, fresh: bool
    ) -> tuple[Resource, ...]:
        """The objects to write: as given, or each ``Change`` applied to the current object (a
        copy of the cache's at first, the store's after a lost race)."""
        objs = []
        for item in items:
            assert not isinstance(item, Removal), "a Removal goes alone"
            if isinstance(item, Resource):
                objs.append(item)
                continue
            assert not item.spec_because, "a spec Change goes alone"
            cached = None if fresh else self.cache.get(item.cls, item.name)
            current = copied(cached) if cached is not None else self.store.get(item.cls, item.name)
            item.apply(current)
            objs.append(current)
        return tuple(objs)


def _alone_at_once(items: Sequence[Resource | Change[Any] | Removal]) -> bool:
    only = items[0] if len(items) == 1 else None
    return isinstance(only, Removal) or (isinstance(only, Change) and bool(only.spec_because))


def _ours(items: Sequence[Resource | Change[Any] | Removal], lost: Conflict) -> bool:
    """Whether the lost race is on a ``Change``'s object (read again and tried again)."""
    return any(isinstance(i, Change) and (i.cls.KIND, i.name) == (lost.kind, lost.name) for i in items)


@dataclass(frozen=True)
class Change(Generic[R]):
    """An item of ``ControllerContext.write``: the current ``name`` of ``cls`` changed by
    ``apply`` (a pure function of the object), read and applied again when another writer came
    first. ``spec_because``: the rare controller step that changes a spec says why (a restore
    overwrites the VM from its snapshot; a block migration moves a Volume to the target's pool;
    a fence is recorded on the host's spec); such a change is written alone, with ``claims``
    (what the changed object holds alone: a VM's MACs and addresses)."""

    cls: type[R]
    name: str
    apply: Callable[[R], None]
    spec_because: str = ""
    claims: Callable[[R], Sequence[Claim]] | None = None


@dataclass(frozen=True)
class Removal:
    """An item of ``ControllerContext.write``: the object's row goes (its finalizers are done)."""

    cls: type[Resource]
    name: str


_ATTEMPTS = 20
"""How often a ``Change`` is tried again on a lost race."""

__all__ = ["Change", "ControllerContext", "Removal"]
