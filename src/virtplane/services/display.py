"""A VM's screen as the API hands it out: a connection to its VNC server made by the driver
of the VM's current host (``open_display``: through libvirt, nothing listens on a network),
and screenshots. The refusals are the serial console's (``console.live_domain``), plus
``ScreenUnsupported`` for a host whose domains have no screen.

Unlike the serial console, a screen may have several viewers at once (VNC shares it), so
there is no busy state and no takeover; every session is in the audit log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from virtplane.controllers.context import ControllerContext
from virtplane.domain.errors import Refused
from virtplane.drivers import errors as driver_errors
from virtplane.drivers.base import DisplayStream, HypervisorDriver
from virtplane.services.console import live_domain

__all__ = ["DisplayService", "DisplaySession"]

T = TypeVar("T")


@dataclass(eq=False)
class DisplaySession:
    vm: str
    host: str
    domain: str
    stream: DisplayStream
    driver: HypervisorDriver
    last_activity: float = 0.0
    """The loop's clock when a byte last went either way (the idle timeout counts from it)."""


class DisplayService:
    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx

    async def open(self, vm_name: str) -> DisplaySession:
        """Connect to the VNC server of ``vm_name``'s screen on the host it runs on."""
        host, driver, domain = await live_domain(self._ctx, vm_name, "a screen")
        stream = await _asking(host, vm_name, lambda: driver.open_display(domain))
        return DisplaySession(vm_name, host, domain, stream, driver)

    async def screenshot(self, vm_name: str) -> bytes:
        """``vm_name``'s screen now, as PNG."""
        host, driver, domain = await live_domain(self._ctx, vm_name, "a screen")
        return await _asking(host, vm_name, lambda: driver.screenshot(domain))


async def _asking(host: str, vm_name: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call``'s result, its driver errors as the domain's refusals."""
    try:
        return await call()
    except (driver_errors.NotRunning, driver_errors.NotFound) as exc:
        raise Refused("NotRunning", f"VM {vm_name} is not running on host {host} now") from exc
    except driver_errors.Unsupported as exc:
        raise Refused("ScreenUnsupported", f"host {host} cannot show VM {vm_name}'s screen: {exc}") from exc
    except driver_errors.DriverError as exc:
        raise Refused("HostUnreachable", f"host {host}: {exc}") from exc
