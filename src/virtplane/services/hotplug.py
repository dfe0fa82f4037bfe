"""Admission of a change to a running VM's disks and NICs (hot-plug), where the API can know.

The VM controller attaches and detaches what changed while the VM runs
(``controllers.vm.devices``); what it could only fail at is refused here with a reason:
the boot disk taken out or replaced (the guest runs from it), a new NIC on a network
the VM's host does not have, a new disk on a pool the host does not reach. The host's
own refusals (a bus without a free slot, a guest that ignores the request) are only
known there and become the VM's DevicesReady condition.
"""

from __future__ import annotations

from virtplane.domain.errors import Refused
from virtplane.domain.networks import host_lacks
from virtplane.domain.phases import UP_PHASES
from virtplane.domain.resources import Capability, Disk, VirtualMachine
from virtplane.runtime.cache import Cache


def boot_disk(disks: list[Disk]) -> str | None:
    """The volume the domain boots from: its first disk in boot order (``vm_disks``' order)."""
    ordered = sorted(enumerate(disks), key=lambda p: p[1].boot_order or 1000 + p[0])
    return ordered[0][1].volume if ordered else None


def admit_hotplug(cache: Cache, current: VirtualMachine, new: VirtualMachine) -> None:
    host_name = current.status.host
    if host_name is None or current.status.phase not in UP_PHASES:
        return  # not running: the next definition takes the spec as it is
    name = current.metadata.name
    boot = boot_disk(current.spec.disks)
    if boot is not None and boot_disk(new.spec.disks) != boot:
        raise Refused(
            "BootDiskInUse",
            f"volume {boot} is the boot disk of VM {name}, which is {current.status.phase.value}: "
            "it cannot be detached or replaced while the VM runs; stop the VM first",
        )
    host = cache.host(host_name)
    if host is None:
        return
    old_disks = {d.volume for d in current.spec.disks}
    for disk in new.spec.disks:
        volume = cache.volume(disk.volume) if disk.volume not in old_disks else None
        pool = cache.pool(volume.spec.pool) if volume is not None else None
        if pool is not None and host_name not in pool.status.reachable_hosts:
            raise Refused(
                "PoolNotReachable",
                f"volume {disk.volume} is in pool {pool.metadata.name}, which host {host_name} "
                f"(where VM {name} runs) does not reach",
            )
    old_networks = {n.network for n in current.spec.nics}
    for index, nic in enumerate(new.spec.nics):
        network = cache.network(nic.network) if nic.network not in old_networks else None
        if network is None:
            continue  # an unknown network: NIC admission says so
        lacks = host_lacks(
            network.spec,
            host_name,
            host.spec.cluster,
            frozenset(host.status.bridges),
            Capability.USER_NETWORK in host.status.capabilities,
        )
        if lacks is not None:
            raise Refused(
                "NetworkNotOnHost",
                f"spec.nics[{index}]: network {nic.network} is not on host {host_name}, where VM "
                f"{name} runs ({lacks}): it cannot be hot-plugged there",
            )


__all__ = ["admit_hotplug", "boot_disk"]
