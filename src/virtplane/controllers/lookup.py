"""Reads several controllers share: a host's driver, a VM's disks and boot files as the driver needs them."""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.storage import image_ref
from virtplane.domain.networks import NetworkKind
from virtplane.domain.resources import Disk, Host, ImageKind, PoolKind, VirtualMachine, VolumePhase
from virtplane.drivers.base import DiskAttachment, HypervisorDriver, ImageRef, NicAttachment
from virtplane.drivers.errors import HostUnreachable
from virtplane.runtime.cache import Cache


async def host_driver(
    ctx: ControllerContext, host_name: str | None
) -> tuple[Host | None, HypervisorDriver | None, str]:
    """(host, connected driver, problem): the driver is None when the host is unknown or away."""
    if not host_name:
        return None, None, ""
    host = ctx.read(Host, host_name)
    if host is None:
        return None, None, f"host {host_name} does not exist"
    try:
        return host, await ctx.hosts.get(host.spec.uri), ""
    except HostUnreachable as exc:
        return host, None, f"host {host_name} is unreachable: {exc}"


def vm_disks(cache: Cache, vm: VirtualMachine) -> tuple[list[DiskAttachment], str]:
    """The VM's disks in boot order, or the reason they are not ready."""
    disks = []
    ordered = sorted(enumerate(vm.spec.disks), key=lambda p: p[1].boot_order or 1000 + p[0])
    for _, disk in ordered:
        attachment, problem = disk_attachment(cache, vm.metadata.name, disk)
        if attachment is None:
            return [], problem
        disks.append(attachment)
    return disks, ""


def disk_attachment(cache: Cache, vm_name: str, disk: Disk) -> tuple[DiskAttachment | None, str]:
    """One disk of VM ``vm_name`` as the driver takes it, or the reason it is not ready."""
    volume = cache.volume(disk.volume)
    if volume is None:
        return None, f"volume {disk.volume} does not exist"
    if volume.status.phase is not VolumePhase.READY:
        return None, f"volume {disk.volume} is {volume.status.phase.value}"
    if volume.status.attached_vm != vm_name:  # one VM per disk (controllers.attachments)
        holder = volume.status.attached_vm
        return None, (
            f"volume {disk.volume} is attached to VM {holder}"
            if holder
            else f"volume {disk.volume} is not attached to this VM yet"
        )
    pool = cache.pool(volume.spec.pool)
    return (
        DiskAttachment(
            path=volume.status.path,
            boot_order=disk.boot_order,
            shared=pool is not None and pool.spec.kind is PoolKind.SHARED,
            volume=volume.metadata.name,
            size_gib=volume.spec.size_gib,
        ),
        "",
    )


def vm_nics(cache: Cache, vm: VirtualMachine) -> tuple[tuple[NicAttachment, ...], str]:
    """The VM's NICs on its networks' bridges, or why not (a network gone: the API refuses to
    delete one that a VM lists, so only a race gets here)."""
    nics = []
    for nic in vm.spec.nics:
        network = cache.network(nic.network)
        if network is None:
            return (), f"network {nic.network} does not exist"
        bridge = None if network.spec.kind is NetworkKind.USER else network.spec.bridge
        nics.append(
            NicAttachment(mac=nic.mac or "", bridge=bridge, vlan=network.spec.vlan, network=nic.network)
        )
    return tuple(nics), ""


BootImages = tuple[ImageRef | None, ImageRef | None]
"""(kernel, initrd) of a VM's direct kernel boot."""


def vm_cdrom(cache: Cache, vm: VirtualMachine) -> tuple[ImageRef | None, str]:
    """The library file of the VM's installer CD-ROM (none: None), or why it cannot be used."""
    if vm.spec.cdrom is None:
        return None, ""
    return image_ref(cache, vm.spec.cdrom, ImageKind.ISO)


def vm_boot(cache: Cache, vm: VirtualMachine) -> tuple[BootImages, str]:
    """The library files of the VM's kernel and initrd, or the reason they cannot be used."""
    boot = vm.spec.boot
    if boot is None:
        return (None, None), ""
    kernel, problem = image_ref(cache, boot.kernel, ImageKind.KERNEL)
    initrd = None
    if not problem and boot.initrd:
        initrd, problem = image_ref(cache, boot.initrd, ImageKind.INITRD)
    return ((kernel, initrd), "") if not problem else ((None, None), problem)
