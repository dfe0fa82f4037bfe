"""What one token may hold and do at once: open watches, and writes per second.

Checked once the token is known (a dict look-up) and before any store or cache work of the
request. A refusal is 429 with reason TooManyWatches or TooManyWrites, and ``retry_after_s``.
Limits per connection and on the request's head are the server's (``virtplane.http_limits``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from math import ceil

from fastapi import Request

from virtplane.api.errors import ApiError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class RequestLimits:
    """The limits of one server (``serve --max-watches-per-token`` and so on)."""

    max_watches_per_token: int = 50
    writes_per_second: float = 100.0
    """Sustained writes per token; 0: no limit."""
    write_burst: int = 200
    """Writes a token may make at once after a quiet while."""


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class Limiter:
    """The counters of one application: watches open and write buckets, by principal."""

    def __init__(self, limits: RequestLimits | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits or RequestLimits()
        self._clock = clock
        self._watches: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()  # list routes run in worker threads; streams end on the loop

    def watches_of(self, principal: str) -> int:
        return self._watches.get(principal, 0)

    def write(self, principal: str) -> None:
        """Take one write from ``principal``'s bucket, or raise 429 TooManyWrites."""
        rate, burst = self.limits.writes_per_second, self.limits.write_burst
        if rate <= 0:
            return
        now = self._clock()
        bucket = self._buckets.get(principal)
        if bucket is None:
            bucket = self._buckets[principal] = _Bucket(float(burst), now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / rate
            raise ApiError(
                429,
                "TooManyWrites",
                f"{principal} may make {rate:g} writes per second (bursts of {burst}); retry in {wait:.2f} s",
                retry_after_s=ceil(wait),
            )
        bucket.tokens -= 1.0

    def watched(self, principal: str, opened: Callable[[], AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
        """The stream ``opened()`` makes, counted among ``principal``'s watches while it runs.

        429 TooManyWatches, before ``opened`` is called, if it has as many open as it may.
        """
        limit = self.limits.max_watches_per_token
        with self._lock:
            open_now = self._watches.get(principal, 0)
            if open_now < limit:
                self._watches[principal] = open_now + 1
        if open_now >= limit:
            raise ApiError(
                429,
                "TooManyWatches",
                f"{principal} has {limit} watches open already; end one (or wait for its timeout_s)",
                retry_after_s=1,
            )
        try:
            stream = opened()
        except BaseException:
            self._closed(principal)
            raise
        return self._counted(principal, stream)

    def _closed(self, principal: str) -> None:
        with self._lock:
            left = self._watches.get(principal, 1) - 1
            if left > 0:
                self._watches[principal] = left
            else:
                self._watches.pop(principal, None)

    async def _counted(self, principal: str, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in stream:
                yield chunk
        finally:
            self._closed(principal)
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()


def limiter(request: Request) -> Limiter:
    found: Limiter = request.app.state.limiter
    return found


def check_write(request: Request, principal: str) -> None:
    """Count a write of ``principal`` (any method but GET, HEAD and OPTIONS)."""
    if request.method not in SAFE_METHODS:
        limiter(request).write(principal)
