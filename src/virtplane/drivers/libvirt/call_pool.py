"""The libvirt driver's blocking calls: on a small thread pool, and let go of on close.

A call to a daemon that stopped answering (stopped, hung) stays in its thread until the
daemon answers or ends (the connection has no keepalive: docs/decisions.md). Closing the pool lets every caller still waiting go at once with
HostUnreachable; the call itself finishes, or not, in its thread, unawaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from virtplane.drivers.errors import HostUnreachable

__all__ = ["CallPool"]

T = TypeVar("T")


class CallPool:
    def __init__(self, uri: str, workers: int = 4) -> None:
        self._uri = uri
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="libvirt")
        self._waiters: set[asyncio.Future[None]] = set()
        self._closed = False

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in a thread of the pool; HostUnreachable if the pool closes first."""
        if self._closed:
            raise HostUnreachable(f"{self._uri}: the connection is closed")
        loop = asyncio.get_running_loop()
        call = loop.run_in_executor(self.executor, fn)
        waiter = loop.create_future()
        call.add_done_callback(lambda _: _release(waiter))
        self._waiters.add(waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)
            if not call.done():  # let go (the pool closed) or given up (a time limit): abandoned
                call.add_done_callback(_forget)
        if not call.done():
            raise HostUnreachable(f"{self._uri}: the connection was closed while a call waited for the host")
        return call.result()

    def close(self) -> None:
        """Let every waiting caller go; the pool's threads end with their calls."""
        self._closed = True
        for waiter in list(self._waiters):
            waiter.get_loop().call_soon_threadsafe(_release, waiter)
        self.executor.shutdown(wait=False)


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _forget(call: asyncio.Future[Any]) -> None:
    """An abandoned call's outcome is nobody's (and no 'never retrieved' warning)."""
    if not call.cancelled():
        call.exception()
