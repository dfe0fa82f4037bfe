"""A cache bounded in entries and in bytes, whose entries expire: the API's known tokens.

Only what a look-up found goes in (``virtplane.api.auth.TokenCache``): a client sending
wrong tokens, each different and large, makes it hold nothing more.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")

ENTRY_OVERHEAD_BYTES = 200
"""What an entry costs beside its key's characters (the dict slot, the tuple, the value)."""


class BoundedCache(Generic[V]):
    """str → V for ``ttl_s`` seconds; the least recently used entries leave first once there
    are ``max_entries`` of them or their keys and overhead pass ``max_bytes``."""

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def cost(key: str) -> int:
        return len(key) + ENTRY_OVERHEAD_BYTES

    def get(self, key: str) -> V | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        if hit[0] <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return hit[1]

    def put(self, key: str, value: V) -> None:
        if self.cost(key) > self.max_bytes:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (self._clock() + self._ttl_s, value)
        self.bytes += self.cost(key)
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _drop(self, key: str) -> None:
        del self._entries[key]
        self.bytes -= self.cost(key)
