"""One driver connection per host URI, opened lazily and reopened after a failure."""

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


class HostConnections:
    def __init__(self, factory: DriverFactory, on_event: EventHandler) -> None:
        self._factory = factory
        self._on_event = on_event
        self._drivers: dict[str, HypervisorDriver] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _sink(self, event: DomainEvent) -> None:
        """Driver events may come from a libvirt thread: hop onto the loop."""
        call_on_loop(self._loop, self._on_event, event)

    async def get(self, uri: str) -> HypervisorDriver:
        """The connected driver for ``uri``; raises HostUnreachable if it cannot connect."""
        driver = self._drivers.get(uri)
        if driver is not None:
            return driver
        self._loop = asyncio.get_running_loop()
        lock = self._locks.setdefault(uri, asyncio.Lock())
        async with lock:
            driver = self._drivers.get(uri)
            if driver is not None:
                return driver
            try:
                driver = self._factory(uri)
            except DriverError:
                raise
            except Exception as exc:  # a bad URI must read as an unreachable host, not crash a worker
                raise HostUnreachable(f"cannot open a driver for {uri}: {exc}") from exc
            driver.set_event_sink(self._sink)
            await driver.connect()
            self._drivers[uri] = driver
            log.info("connected to %s", uri)
            return driver

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
        for uri in list(self._drivers):
            await self.drop(uri)
