"""One driver connection per host URI, opened lazily and reopened after a failure.

Opening a connection is bounded in time. libvirt's open has no timeout of its own (its
keepalive starts only once the connection is open): a daemon that accepts the socket but
never answers (stopped, hung, a half-dead link) would hold the caller for ever, and with it
the host's liveness and fencing. So a caller waits ``connect_timeout_s`` at most and reads
HostUnreachable; the open goes on in the background, one per host, and the next caller
waits for that same one instead of starting another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from virtplane.drivers.base import DomainEvent, HypervisorDriver
from virtplane.drivers.errors import DriverError, HostUnreachable
from virtplane.loops import call_on_loop

log = logging.getLogger("virtplane.hosts")

DriverFactory = Callable[[str], HypervisorDriver]
EventHandler = Callable[[DomainEvent], None]


CONNECT_TIMEOUT_S = 10.0


class HostConnections:
    def __init__(
        self, factory: DriverFactory, on_event: EventHandler, connect_timeout_s: float = CONNECT_TIMEOUT_S
    ) -> None:
        self._factory = factory
        self._on_event = on_event
        self.connect_timeout_s = connect_timeout_s
        self._drivers: dict[str, HypervisorDriver] = {}
        self._opening: dict[str, asyncio.Task[HypervisorDriver]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _sink(self, event: DomainEvent) -> None:
        """Driver events may come from a libvirt thread: hop onto the loop."""
        call_on_loop(self._loop, self._on_event, event)

    async def get(self, uri: str) -> HypervisorDriver:
        """The connected driver for ``uri``; raises HostUnreachable if it cannot connect, or
        does not within ``connect_timeout_s``."""
        driver = self._drivers.get(uri)
        if driver is not None:
            return driver
        self._loop = asyncio.get_running_loop()
        opening = self._opening.get(uri)
        if opening is None:
            opening = self._opening[uri] = asyncio.create_task(self._open(uri), name=f"connect {uri}")
            opening.add_done_callback(lambda done: self._opened(uri, done))
        try:
            return await asyncio.wait_for(asyncio.shield(opening), self.connect_timeout_s)
        except TimeoutError:
            raise HostUnreachable(
                f"{uri}: the connection was not answered within {self.connect_timeout_s:g}s"
            ) from None

    async def _open(self, uri: str) -> HypervisorDriver:
        try:
            driver = self._factory(uri)
        except DriverError:
            raise
        except Exception as exc:  # a bad URI must read as an unreachable host, not crash a worker
            raise HostUnreachable(f"cannot open a driver for {uri}: {exc}") from exc
        driver.set_event_sink(self._sink)
        try:
            await driver.connect()
        except DriverError:
            await driver.close()  # it would go on reconnecting on its own, unseen: the next get opens anew
            raise
        self._drivers[uri] = driver
        log.info("connected to %s", uri)
        return driver

    def _opened(self, uri: str, done: asyncio.Task[HypervisorDriver]) -> None:
        if self._opening.get(uri) is done:
            del self._opening[uri]
        if not done.cancelled():
            done.exception()  # a failed open is its callers' to read; none may be left waiting

    def cached(self, uri: str) -> HypervisorDriver | None:
        return self._drivers.get(uri)

    async def drop(self, uri: str) -> None:
        """Forget a broken connection; the next ``get`` reconnects."""
        driver = self._drivers.pop(uri, None)
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.set_event_sink(None)
                await driver.close()

    async def close_all(self) -> None:
        for opening in list(self._opening.values()):
            opening.cancel()
        for uri in list(self._drivers):
            await self.drop(uri)
