"""Injectable time, so queues and controllers can be tested without sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences between readings mean anything."""
        ...


@runtime_checkable
class ObservableClock(Protocol):
    """A clock whose time jumps only when told, and that announces every jump.

    Waiters on such a clock cannot use real timeouts (fake time would never pass),
    so they wait for the announcement instead.
    """

    def now(self) -> float: ...

    def subscribe(self, on_advance: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_advance`` after each jump; returns a function that unsubscribes."""
        ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """Time that moves only through ``advance``; subscribers hear about every move."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._subscribers: list[Callable[[], None]] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds!r} s)")
        self._now += seconds
        # Copy: a subscriber may unsubscribe while being notified.
        for on_advance in list(self._subscribers):
            on_advance()

    def subscribe(self, on_advance: Callable[[], None]) -> Callable[[], None]:
        self._subscribers.append(on_advance)

        def unsubscribe() -> None:
            if on_advance in self._subscribers:
                self._subscribers.remove(on_advance)

        return unsubscribe


__all__ = ["Clock", "FakeClock", "MonotonicClock", "ObservableClock"]
