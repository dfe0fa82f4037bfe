"""Who wakes whom: each controller declares, next to its reconciler, the changes that concern it.

A ``Watch`` maps a change of one kind of object (the object before and after it; ``None`` when
it was created or deleted) to the keys of one controller to look at again, reading the cache
for related objects (controller-runtime's ``EnqueueRequestsFromMapFunc``). A request names a
key and nothing else: no reconciler is told what changed. Bootstrap only loops over every
controller's watches on each change of the cache (``requests_for``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from virtplane.domain.resources import Resource
from virtplane.reconcile.types import Request
from virtplane.runtime.cache import Cache

__all__ = ["Mapper", "Watch", "itself", "name_of", "reconciling", "requests_for"]

Mapper = Callable[[Cache, Resource | None, Resource | None], Iterable[Request]]
"""(cache, the object before, after) -> the keys to look at again."""


@dataclass(frozen=True)
class Watch:
    kind: str
    """The kind of the object whose change this watch maps."""
    map: Mapper
    batch_s: float = 0.0
    """How long a key this watch wakes waits before its look: the changes of a burst that
    land meanwhile are one look (Kubernetes' EndpointSlice batch period). 0: at once."""


def name_of(old: Resource | None, new: Resource | None) -> str:
    """The name of the object that changed."""
    obj = new or old
    return obj.metadata.name if obj is not None else ""


reconciling: ContextVar[Request | None] = ContextVar("virtplane_reconciling", default=None)
"""The key whose reconcile runs in this context (set by bootstrap around every reconcile)."""


def itself(kind: str, *, after_own_writes: bool = True) -> Watch:
    """A controller looks again at its own objects whenever they change (or go).

    ``after_own_writes=False``: not when the change is the object's own reconcile writing it.
    For a controller whose every write is followed by a verdict that says when to look
    again (and whose other wake-ups come from other objects' watches), that look only
    repeats the reconcile that has just run.
    """

    def own(_: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
        request = Request(kind, name_of(old, new))
        if not after_own_writes and reconciling.get() == request:
            return []
        return [request]

    return Watch(kind, own)


def requests_for(
    watches: Sequence[Watch], cache: Cache, kind: str, old: Resource | None, new: Resource | None
) -> dict[Request, float]:
    """What the watches of ``kind`` ask for after one change: each key once, in order, with
    the shortest wait any of them asked for it."""
    requests: dict[Request, float] = {}
    for watch in watches:
        if watch.kind == kind:
            for request in watch.map(cache, old, new):
                requests[request] = min(requests.get(request, watch.batch_s), watch.batch_s)
    return requests
