"""A VM's serial console as the API hands it out: the driver's console stream of the VM's
current host, opened through the control plane's connection to that host (libvirt's own
transports, so a remote host works the same), never by the client itself.

The refusals are the domain's: the VM does not exist (NotFound), it is not running
(``NotRunning``), another session holds its console (``ConsoleBusy``: we refuse rather than
force, so one operator never silently cuts another off mid-command), its host cannot be
reached or has no consoles. When the stream ends, ``why_ended`` asks the host what
happened to the guest, since the control plane's own records may not have caught up yet.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.lookup import host_driver
from virtplane.domain.errors import NotFound, Refused
from virtplane.domain.phases import ACTIVE_STATES, LIVE_PHASES
from virtplane.drivers import errors as driver_errors
from virtplane.drivers.base import ConsoleStream, HypervisorDriver, domain_name

__all__ = ["ConsoleService", "ConsoleSession"]


@dataclass(frozen=True)
class ConsoleSession:
    vm: str
    host: str
    domain: str
    stream: ConsoleStream
    driver: HypervisorDriver


class ConsoleService:
    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx

    async def open(self, vm_name: str) -> ConsoleSession:
        """Attach to ``vm_name``'s serial console on the host it runs on (read from the cache:
        the caller catches it up first)."""
        vm = self._ctx.cache.vm(vm_name)
        if vm is None:
            raise NotFound("NotFound", f"VirtualMachine {vm_name} does not exist")
        phase, host_name = vm.status.phase, vm.status.host
        if phase not in LIVE_PHASES or not host_name:
            raise Refused("NotRunning", f"VM {vm_name} is {phase.value}: it has a console only while it runs")
        _host, driver, problem = await host_driver(self._ctx, host_name)
        if driver is None:
            raise Refused("HostUnreachable", problem or f"host {host_name} cannot be reached")
        domain = domain_name(vm.metadata.uid)
        try:
            stream = await driver.open_console(domain)
        except driver_errors.ConsoleBusy as exc:
            raise Refused(
                "ConsoleBusy", f"another session is attached to the console of VM {vm_name}; detach it first"
            ) from exc
        except (driver_errors.NotRunning, driver_errors.NotFound) as exc:
            raise Refused("NotRunning", f"VM {vm_name} is not running on host {host_name} now") from exc
        except driver_errors.Unsupported as exc:
            raise Refused(
                "ConsoleUnsupported", f"host {host_name}'s hypervisor has no serial console"
            ) from exc
        except driver_errors.DriverError as exc:
            raise Refused("HostUnreachable", f"host {host_name}: {exc}") from exc
        return ConsoleSession(vm_name, host_name, domain, stream, driver)

    async def why_ended(self, session: ConsoleSession) -> str:
        """Why the console stream of ``session`` ended, as the host tells it."""
        info = None
        with contextlib.suppress(driver_errors.DriverError):
            info = await session.driver.get_info(session.domain)
            if info is None or info.migrated_away:
                return f"VM {session.vm} is no longer on host {session.host} (migrated?); attach again"
            if info.state not in ACTIVE_STATES:
                return f"VM {session.vm} stopped"
        if info is None:
            return f"the connection to host {session.host} was lost"
        return f"host {session.host} closed the console"
