"""The VM reconcile's look at its guest's agent: whether one is connected, and the addresses the
guest reports (``status.guest_agent``, ``status.guest_addresses``, beside the IPAM ones in
``status.nics``).

Whether the agent is connected is asked at each look of a running VM (one cheap driver call);
the addresses are read when the agent connects (its event wakes the VM) and then every
``vm.guest_agent.refresh_s``. Nothing is written when nothing changed.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from ipaddress import ip_interface

from virtplane.controllers.vm.state import VMState
from virtplane.domain.phases import DomainState
from virtplane.domain.resources import GuestAgentState, GuestInterfaceStatus
from virtplane.drivers.base import GuestInterface
from virtplane.drivers.errors import DriverError
from virtplane.reconcile.types import Result

log = logging.getLogger("virtplane.controllers.vm")


def shown(interfaces: tuple[GuestInterface, ...]) -> list[GuestInterfaceStatus]:
    """The guest's interfaces as the status shows them: without loopback addresses, and without
    the loopback interface unless it holds another address."""
    found = []
    for interface in interfaces:
        addresses = [a for a in interface.addresses if not ip_interface(a).is_loopback]
        if interface.name != "lo" or addresses:
            found.append(GuestInterfaceStatus(name=interface.name, mac=interface.mac, addresses=addresses))
    return found


async def guest(state: VMState) -> Result | None:
    status, info, uid = state.status, state.info, state.vm.metadata.uid
    looks = state.ctx.guest_looks
    if info is None or info.state is DomainState.SHUTOFF:
        status.guest_agent, status.guest_addresses = None, []
        looks.pop(uid, None)
        return None
    driver = (await state.host()).driver
    if info.state is not DomainState.RUNNING or driver is None:
        return None  # paused, booting, migrating: what was seen last stands
    try:
        connected = await driver.agent_connected(state.domain)
        if not connected:
            status.guest_agent, status.guest_addresses = GuestAgentState.NOT_CONNECTED, []
            looks.pop(uid, None)
            return None
        refresh = timedelta(seconds=state.ctx.settings.get_float("vm.guest_agent.refresh_s"))
        last = looks.get(uid)
        if (
            status.guest_agent is GuestAgentState.CONNECTED
            and last is not None
            and state.now - last < refresh
        ):
            return Result(requeue_after=(last + refresh - state.now).total_seconds())
        status.guest_addresses = shown(await driver.guest_interfaces(state.domain))
        status.guest_agent = GuestAgentState.CONNECTED
    except DriverError as exc:  # the agent went away between the two calls, or the host did
        log.info("guest agent of %s: %s", state.name, exc)
        return None
    looks[uid] = state.now
    return Result(requeue_after=refresh.total_seconds())


__all__ = ["guest", "shown"]
