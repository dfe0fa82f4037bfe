"""What a host runs, listed once when this process first reaches it: the census of domains.

The host controller lists a host's domains when it first reaches it (after a start of the
control plane, and after each reconnection) and

- records each virtplane domain's host in ``ctx.census`` (VM uid -> host), which the VM
  controller reads before it places a VM that the store has on no host (``vm.steps``): a
  store restored from a backup may not know where a VM runs since;
- reports each virtplane domain whose VM the store does not have with an ``UnknownDomain``
  event on the Host, and leaves it alone. Such domains appear when the store is older than
  the hosts (VMs created since the backup) or a VM's record was lost; destroying one would
  destroy a VM that exists, adopting it would invent a VM nobody described: the operator
  decides (docs/decisions.md). Domains not named by virtplane are the host's own business.
"""

from __future__ import annotations

import logging

from virtplane.controllers.context import ControllerContext
from virtplane.domain.resources import Host
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import DriverError

__all__ = ["survey_domains"]

log = logging.getLogger("virtplane.controllers.host")


async def survey_domains(ctx: ControllerContext, host: Host, driver: HypervisorDriver) -> bool:
    """List the host's domains into the census and report the unknown ones; False when the host
    could not list them (the next look tries again; the probe's own verdict on the host stands)."""
    try:
        domains = await driver.list_domains()
    except DriverError as exc:
        log.info("domains of %s not listed yet: %s", host.metadata.name, exc)
        return False
    name = host.metadata.name
    for info in domains:
        if not info.vm_uid:
            continue
        ctx.census[info.vm_uid] = name
        if ctx.cache.vm_by_uid(info.vm_uid) is None:
            ctx.event(
                host,
                "UnknownDomain",
                f"domain {info.name} ({info.state.value}) belongs to no VM in the store; it is left as "
                "it is (a store restored from a backup older than the VM?)",
                warning=True,
            )
    ctx.surveyed.add(name)
    return True
