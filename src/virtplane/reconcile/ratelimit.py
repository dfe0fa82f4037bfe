"""Per-key exponential backoff: each failure doubles the key's delay, a success resets it."""

from __future__ import annotations

from collections.abc import Hashable


class ItemBackoff:
    """Delay ``base * 2**failures`` seconds, capped at ``cap``; counted separately per key."""

    def __init__(self, base: float = 0.005, cap: float = 300.0) -> None:
        if base <= 0:
            raise ValueError(f"base must be positive, got {base!r}")
        if cap < base:
            raise ValueError(f"cap ({cap!r}) must not be below base ({base!r})")
        self.base = base
        self.cap = cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        """Record one more failure of ``key`` and return how long to wait before retrying it."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        try:
            delay = self.base * 2.0**failures
        except OverflowError:  # after ~1000 failures 2.0**n no longer fits a float
            return self.cap
        return min(delay, self.cap)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def __len__(self) -> int:
        """Number of keys currently backing off."""
        return len(self._failures)


__all__ = ["ItemBackoff"]
