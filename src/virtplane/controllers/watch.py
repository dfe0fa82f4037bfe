"""Who wakes whom: each controller declares, next to its reconciler, the changes that concern it.

A ``Watch`` maps a change of one kind of object (the object before and after it; ``None`` when
it was created or deleted) to the keys of one controller to look at again, reading the cache
for related objects (controller-runtime's ``EnqueueRequestsFromMapFunc``). A request names a
key and nothing else: no reconciler is told what changed. Bootstrap only loops over every
controller's watches on each change of the cache (``requests_for``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from virtplane.domain.resources import Resource
from virtplane.reconcile.types import Request
from virtplane.runtime.cache import Cache

__all__ = ["Mapper", "Watch", "itself", "name_of", "requests_for"]

Mapper = Callable[[Cache, Resource | None, Resource | None], Iterable[Request]]
"""(cache, the object before, after) -> the keys to look at again."""


@dataclass(frozen=True)
class Watch:
    kind: str
    """The kind of the object whose change this watch maps."""
    map: Mapper


def name_of(old: Resource | None, new: Resource | None) -> str:
    """The name of the object that changed."""
    obj = new or old
    return obj.metadata.name if obj is not None else ""


def itself(kind: str) -> Watch:
    """A controller looks again at its own objects whenever they change (or go)."""

    def own(_: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
        return [Request(kind, name_of(old, new))]

    return Watch(kind, own)


def requests_for(
    watches: Sequence[Watch], cache: Cache, kind: str, old: Resource | None, new: Resource | None
) -> list[Request]:
    """What the watches of ``kind`` ask for after one change: each key once, in order."""
    requests: dict[Request, None] = {}
    for watch in watches:
        if watch.kind == kind:
            requests.update(dict.fromkeys(watch.map(cache, old, new)))
    return list(requests)
