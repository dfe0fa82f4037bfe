"""A VM's serial console as the API hands it out: the driver's console stream of the VM's
current host, opened through the control plane's connection to that host (libvirt's own
transports, so a remote host works the same), never by the client itself.

The refusals are the domain's: the VM does not exist (NotFound), it is not running
(``NotRunning``), another session holds its console (``ConsoleBusy``: we refuse rather than
force, so one operator never silently cuts another off mid-command), its host cannot be
reached or has no consoles. When the stream ends, ``why_ended`` asks the host what
happened to the guest, since the control plane's own records may not have caught up yet.

An admin may take a busy console over (``open(takeover_by=...)``): the session this server
holds is told (``ConsoleSession.taken_over``), its relay ends it and says who took it, and
the admin's opens once it has let go (``release``). A console held outside virtplane
(``virsh console``) stays busy: virtplane never forces libvirt's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.lookup import host_driver
from virtplane.domain.errors import NotFound, Refused
from virtplane.domain.phases import ACTIVE_STATES, LIVE_PHASES
from virtplane.drivers import errors as driver_errors
from virtplane.drivers.base import ConsoleStream, HypervisorDriver, domain_name

__all__ = ["ConsoleService", "ConsoleSession", "live_domain"]


TAKEOVER_WAIT_S = 10.0
"""How long a takeover waits for the session it ends to let go of the console."""


@dataclass(eq=False)
class ConsoleSession:
    vm: str
    host: str
    domain: str
    stream: ConsoleStream
    driver: HypervisorDriver
    taken_over: asyncio.Event = field(default_factory=asyncio.Event)
    taken_over_by: str = ""
    released: asyncio.Event = field(default_factory=asyncio.Event)
    last_activity: float = 0.0
    """The loop's clock when a byte last went either way (the idle timeout counts from it)."""


async def live_domain(ctx: ControllerContext, vm_name: str, what: str) -> tuple[str, HypervisorDriver, str]:
    """The host ``vm_name`` runs on, its driver and the VM's domain there (from the cache: the
    caller catches it up first); refused when the VM does not run or its host is away. ``what``
    the caller wants of it, for the message ("a console")."""
    vm = ctx.cache.vm(vm_name)
    if vm is None:
        raise NotFound("NotFound", f"VirtualMachine {vm_name} does not exist")
    phase, host_name = vm.status.phase, vm.status.host
    if phase not in LIVE_PHASES or not host_name:
        raise Refused("NotRunning", f"VM {vm_name} is {phase.value}: it has {what} only while it runs")
    _host, driver, problem = await host_driver(ctx, host_name)
    if driver is None:
        raise Refused("HostUnreachable", problem or f"host {host_name} cannot be reached")
    return host_name, driver, domain_name(vm.metadata.uid)


class ConsoleService:
    def __init__(self, ctx: ControllerContext) -> None:
        self._ctx = ctx
        self._attached: dict[str, ConsoleSession] = {}

    def release(self, session: ConsoleSession) -> None:
        """The session's stream is closed: the console is free (a takeover waits for this)."""
        if self._attached.get(session.vm) is session:
            del self._attached[session.vm]
        session.released.set()

    async def open(self, vm_name: str, *, takeover_by: str | None = None) -> ConsoleSession:
        """Attach to ``vm_name``'s serial console on the host it runs on (read from the cache:
        the caller catches it up first). ``takeover_by`` (an admin's name): end the session
        that holds it here first."""
        try:
            session = await self._open(vm_name)
        except Refused as busy:
            holder = self._attached.get(vm_name)
            if busy.reason != "ConsoleBusy" or takeover_by is None or holder is None:
                raise
            holder.taken_over_by = takeover_by
            holder.taken_over.set()
            try:
                await asyncio.wait_for(holder.released.wait(), TAKEOVER_WAIT_S)
            except TimeoutError:
                raise busy from None
            session = await self._open(vm_name)
        self._attached[vm_name] = session
        return session

    async def _open(self, vm_name: str) -> ConsoleSession:
        host_name, driver, domain = await live_domain(self._ctx, vm_name, "a console")
        try:
            stream = await driver.open_console(domain)
        except driver_errors.ConsoleBusy as exc:
            raise Refused(
                "ConsoleBusy",
                f"another session is attached to the console of VM {vm_name}; detach it first "
                "(an admin may take it over: ?takeover=true, `virtplane console --takeover`)",
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
