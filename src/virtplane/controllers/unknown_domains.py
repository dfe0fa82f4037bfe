"""Domains a host runs that belong to no VM in the store: reported, never touched.

They appear when the store is older than the hosts (restored from a backup: VMs created
since have domains it does not know) or when a VM's record was lost. Destroying them would
destroy a VM that exists; adopting them would invent a VM nobody asked for. So the host
controller lists a host's domains when it first reaches it (after a start of the control
plane, and after each reconnection) and records one ``UnknownDomain`` event per such
domain on the Host; what to do with it is the operator's call (docs/decisions.md).
"""

from __future__ import annotations

import logging

from virtplane.controllers.context import ControllerContext
from virtplane.domain.resources import Host
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import DriverError

__all__ = ["report_unknown_domains"]

log = logging.getLogger("virtplane.controllers.host")


async def report_unknown_domains(ctx: ControllerContext, host: Host, driver: HypervisorDriver) -> bool:
    """Record an ``UnknownDomain`` event for each of the host's virtplane domains whose VM the
    store does not have (domains not named by virtplane are the host's own business). False when
    the host could not list its domains: the next look tries again, and the probe's own verdict
    on the host stands."""
    try:
        domains = await driver.list_domains()
    except DriverError as exc:
        log.info("domains of %s not listed yet: %s", host.metadata.name, exc)
        return False
    for info in domains:
        if not info.vm_uid or ctx.cache.vm_by_uid(info.vm_uid) is not None:
            continue
        ctx.event(
            host,
            "UnknownDomain",
            f"domain {info.name} ({info.state.value}) belongs to no VM in the store; it is left as it "
            "is (a store restored from a backup older than the VM?)",
            warning=True,
        )
    return True
