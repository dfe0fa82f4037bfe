"""``Volume.status.attached_vm``: the Volume controller records which VM holds each volume
(``domain.attachments.holder``); the API, the VM controller and restore respect it.

A VM uses a disk only once the volume is attached to it (``controllers.lookup.vm_disks``
says DiskNotReady until then), so two VMs created at once never both get the disk:
the one the rule picks runs, the other waits and says which VM holds it.
"""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.domain.attachments import VolumeUser, holder
from virtplane.domain.resources import Resource, VirtualMachine, Volume
from virtplane.runtime.cache import Cache

__all__ = ["attached_elsewhere", "sync_attachment", "wake_on_change"]


def _user(vm: VirtualMachine, volume: str) -> VolumeUser:
    return VolumeUser(
        vm=vm.metadata.name,
        lists_volume=any(d.volume == volume for d in vm.spec.disks),
        deleting=vm.metadata.deletion_requested_at is not None,
        domain_may_hold=vm.status.host is not None and vm.status.observed_generation < vm.metadata.generation,
        created_at=vm.metadata.created_at,
    )


def _users(cache: Cache, volume: Volume) -> list[VolumeUser]:
    name = volume.metadata.name
    names = set(cache.vms_using_volume(name))
    if volume.status.attached_vm:
        names.add(volume.status.attached_vm)
    return [_user(vm, name) for vm in (cache.vm(n) for n in sorted(names)) if vm is not None]


def attached_elsewhere(cache: Cache, volume: str, vm: str, holder: str | None = None) -> str | None:
    """The VM other than ``vm`` that holds ``volume`` (``holder``, its status.attached_vm), or
    else lists it and is not being deleted; None when ``vm`` may have it."""
    if holder and holder != vm and cache.vm(holder) is not None:
        return holder
    for other in cache.vms_using_volume(volume):
        found = cache.vm(other)
        if other != vm and found is not None and found.metadata.deletion_requested_at is None:
            return other
    return None


def sync_attachment(ctx: ControllerContext, volume: Volume) -> Volume:
    """Record the volume's holder; returns the volume as written."""
    current = volume.status.attached_vm
    wanted = holder(current, _users(ctx.cache, volume))
    if wanted == current:
        return volume
    volume.status.attached_vm = wanted
    written = ctx.write(volume)
    if current is not None:
        ctx.event(written, "Released", f"released by VM {current}")
    if wanted is not None:
        ctx.event(written, "Attached", f"attached to VM {wanted}")
    return written


def wake_on_change(kind: str, old: Resource | None, new: Resource | None) -> list[tuple[str, str]]:
    """The volumes to look at again after a VM changed in a way that can move an attachment."""
    if kind != "VirtualMachine":
        return []
    before = old if isinstance(old, VirtualMachine) else None
    after = new if isinstance(new, VirtualMachine) else None

    def facts(vm: VirtualMachine | None) -> tuple[object, ...]:
        if vm is None:
            return ()
        return (
            tuple(d.volume for d in vm.spec.disks),
            vm.metadata.deletion_requested_at is not None,
            vm.status.host is not None and vm.status.observed_generation < vm.metadata.generation,
        )

    if facts(before) == facts(after):
        return []
    volumes = {d.volume for vm in (before, after) if vm is not None for d in vm.spec.disks}
    return [("Volume", name) for name in sorted(volumes)]
