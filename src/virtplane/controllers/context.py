"""What every controller gets: the store, the cache, host connections, settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from virtplane.domain.resources import EventType, Resource
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.store.settings import Settings
from virtplane.store.store import Store, utcnow

R = TypeVar("R", bound=Resource)


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

    def event(
        self, obj: Resource | tuple[str, str], reason: str, message: str, warning: bool = False
    ) -> None:
        kind, name = (obj.KIND, obj.metadata.name) if isinstance(obj, Resource) else obj
        self.store.record_event(
            kind, name, reason, message, EventType.WARNING if warning else EventType.NORMAL
        )

    def write(self, obj: R) -> R:
        """Write with a version check and take the result into the cache at once."""
        written = self.store.update(obj)
        self.cache.put(written)
        return written
