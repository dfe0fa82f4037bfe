"""Which VM a volume is attached to: at most one at a time (two guests writing one disk
image corrupt it).

``holder`` is the rule the Volume controller applies to ``Volume.status.attached_vm``:

- the VM that holds the volume keeps it while it lists it in ``spec.disks``, and also
  after it stopped listing it while its domain may still have the disk (it was defined
  from an older spec and not redefined since), and while it is being deleted (its
  domain goes first);
- a volume nobody holds goes to the VM, among those that list it and are not being
  deleted, created first (then by name), so two VMs created at once get one answer.

The API refuses a second VM that lists a volume another live VM holds or lists; this
rule is what makes that safe when two such writes race past the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from virtplane.domain.resources import VirtualMachine

__all__ = ["VolumeUser", "attached_elsewhere", "domain_may_hold", "holder", "users_of"]


@dataclass(frozen=True)
class VolumeUser:
    """A VM as the attachment rule sees it: one that lists the volume, or holds it now."""

    vm: str
    lists_volume: bool
    deleting: bool = False
    domain_may_hold: bool = False
    """Its domain was defined from a spec older than the current one (it may still have the disk)."""
    created_at: datetime | None = None


def holder(current: str | None, users: Sequence[VolumeUser]) -> str | None:
    """The VM the volume is attached to, given its holder now and the VMs that use it.

    ``users`` holds every existing VM that lists the volume, and the current holder if
    it still exists; a holder missing from ``users`` is gone and releases the volume.
    """
    by_name = {user.vm: user for user in users}
    kept = by_name.get(current) if current is not None else None
    if kept is not None and (kept.lists_volume or kept.domain_may_hold):
        return kept.vm
    candidates = [user for user in users if user.lists_volume and not user.deleting]
    if not candidates:
        return None
    first = min(
        candidates,
        key=lambda u: (u.created_at is None, u.created_at.timestamp() if u.created_at else 0.0, u.vm),
    )
    return first.vm


def users_of(volume: str, vms: Iterable[VirtualMachine | None]) -> list[VolumeUser]:
    """The VMs that list ``volume`` or hold it, as the rules see them (missing ones left out)."""
    return [
        VolumeUser(
            vm=vm.metadata.name,
            lists_volume=any(d.volume == volume for d in vm.spec.disks),
            deleting=vm.metadata.deletion_requested_at is not None,
            domain_may_hold=domain_may_hold(vm),
            created_at=vm.metadata.created_at,
        )
        for vm in vms
        if vm is not None
    ]


def domain_may_hold(vm: VirtualMachine) -> bool:
    """Whether ``vm``'s domain may have a disk its spec no longer lists: it was defined from an
    older spec, and its devices were not brought to the current one since (hot-plug)."""
    seen = max(vm.status.observed_generation, vm.status.devices_generation)
    return vm.status.host is not None and seen < vm.metadata.generation


def attached_elsewhere(vm: str, current: str | None, users: Sequence[VolumeUser]) -> str | None:
    """The VM other than ``vm`` that holds the volume (``current``, if it still exists), or else
    lists it and is not being deleted; None when ``vm`` may have it. What the API refuses a
    second VM for, and what a restore leaves alone."""
    present = {user.vm for user in users}
    if current and current != vm and current in present:
        return current
    for user in sorted(users, key=lambda u: u.vm):
        if user.vm != vm and user.lists_volume and not user.deleting:
            return user.vm
    return None
