"""``Volume.status.attached_vm``: the Volume controller records which VM holds each volume
(``domain.attachments.holder``); the API, the VM controller and restore respect it.

A VM uses a disk only once the volume is attached to it (``controllers.lookup.vm_disks``
says DiskNotReady until then), so two VMs created at once never both get the disk:
the one the rule picks runs, the other waits and says which VM holds it.
"""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.watch import name_of
from virtplane.domain import attachments
from virtplane.domain.attachments import VolumeUser, holder, users_of
from virtplane.domain.resources import Resource, VirtualMachine, Volume
from virtplane.reconcile.types import Request
from virtplane.runtime.cache import Cache

__all__ = ["attached_elsewhere", "sync_attachment", "volumes_of_vm"]


def _users(cache: Cache, volume: str, current: str | None) -> list[VolumeUser]:
    names = set(cache.vms_using_volume(volume)) | ({current} if current else set())
    return users_of(volume, (cache.vm(name) for name in sorted(names)))


def attached_elsewhere(cache: Cache, volume: str, vm: str, holder: str | None = None) -> str | None:
    """The VM other than ``vm`` that holds ``volume`` (``holder``, its status.attached_vm), or
    else lists it and is not being deleted; None when ``vm`` may have it."""
    return attachments.attached_elsewhere(vm, holder, _users(cache, volume, holder))


async def sync_attachment(ctx: ControllerContext, volume: Volume) -> Volume:
    """Record the volume's holder; returns the volume as written."""
    current = volume.status.attached_vm
    wanted = holder(current, _users(ctx.cache, volume.metadata.name, current))
    if wanted == current:
        return volume
    volume.status.attached_vm = wanted
    if current is not None:
        ctx.event(volume, "Released", f"released by VM {current}")
    if wanted is not None:
        ctx.event(volume, "Attached", f"attached to VM {wanted}")
    return await ctx.write(volume)


def volumes_of_vm(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """The volumes to look at again after a VM changed in a way that can move an attachment
    (a watch of the Volume controller)."""
    before = old if isinstance(old, VirtualMachine) else None
    after = new if isinstance(new, VirtualMachine) else None

    def facts(vm: VirtualMachine | None) -> tuple[object, ...]:
        if vm is None:
            return ()
        return (
            tuple(d.volume for d in vm.spec.disks),
            vm.metadata.deletion_requested_at is not None,
            attachments.domain_may_hold(vm),
        )

    if facts(before) == facts(after):
        return []
    volumes = {d.volume for vm in (before, after) if vm is not None for d in vm.spec.disks}
    # and what it holds but no longer lists: released once its domain is redefined without it
    # (the Volume controller may have looked before that write)
    volumes.update(cache.volumes_held_by(name_of(old, new)))
    return [Request(Volume.KIND, name) for name in sorted(volumes)]
