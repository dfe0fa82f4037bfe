"""Linked clones: a volume that is a qcow2 overlay on another (its backing file), not a copy.

A linked clone reads what its backing volume holds and writes only its own changes, so it is
made at once and takes little room; in exchange the backing file must never change nor go
while a linked clone uses it. virtplane makes one only where that holds: the backing volume is
a disk of a template (which never runs) and of nothing else, and is not a linked clone itself
(no chains); or it is a disk a snapshot saved (a file nothing writes). Either is in a shared
pool, the clone in the same pool (on a host's local pool a migration would copy the overlay
to a host without its backing file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from virtplane.domain.errors import Invalid, Refused
from virtplane.domain.resources import PoolKind, StoragePool, VirtualMachine, Volume

__all__ = ["backing_refusal", "linked_refusal", "saved_disk_refusal"]


def linked_refusal(
    source: Volume, source_pool: StoragePool | None, target_pool: str, users: Iterable[VirtualMachine]
) -> Invalid | None:
    """Why a linked clone of ``source`` in ``target_pool`` is not made (``users``: the VMs that
    have ``source`` as a disk), or None."""
    name = source.metadata.name
    refusal = _pool_refusal(name, source.spec.pool, source_pool, target_pool)
    if refusal is not None:
        return refusal
    if source.spec.source is not None and source.spec.source.linked:
        return Invalid(
            "LinkedChain",
            f"volume {name} is a linked clone itself: a linked clone of it is not made (no chains)",
        )
    writers = sorted(vm.metadata.name for vm in users if not vm.spec.template)
    if writers:
        return Invalid(
            "LinkedNeedsTemplate",
            f"volume {name} is a disk of VM {', '.join(writers)}, which may run and change it under its "
            f"linked clones: make it a template first (virtplane vm template {writers[0]}), or leave "
            "linked out for a full copy",
        )
    return None


def saved_disk_refusal(
    snapshot: str, volume: str, volume_pool: StoragePool | None, pool_name: str, target_pool: str
) -> Invalid | None:
    """Why a linked clone of the disk of ``volume`` that ``snapshot`` saved (beside it, in its pool
    ``pool_name``) is not made in ``target_pool``, or None."""
    return _pool_refusal(f"{volume} as snapshot {snapshot} saved it", pool_name, volume_pool, target_pool)


def _pool_refusal(what: str, pool_name: str, pool: StoragePool | None, target_pool: str) -> Invalid | None:
    if target_pool != pool_name:
        return Invalid(
            "LinkedAcrossPools",
            f"a linked clone lives in the pool of its backing file, volume {what} ({pool_name}), not "
            f"{target_pool}; leave linked out for a full copy",
        )
    if pool is None or pool.spec.kind is not PoolKind.SHARED:
        return Invalid(
            "LinkedOnLocalPool",
            f"volume {what} is in a host's local pool {pool_name}: a linked clone would lose its "
            "backing file when its VM migrates; leave linked out for a full copy",
        )
    return None


def backing_refusal(name: str, clones: Sequence[str], *, kind: str = "volume") -> Refused | None:
    """Why the volume (or snapshot) ``name`` cannot be deleted while the linked ``clones`` use it."""
    if not clones:
        return None
    return Refused(
        "SnapshotInUse" if kind == "snapshot" else "VolumeInUse",
        f"{kind} {name} holds the backing file of linked clones {', '.join(clones)}: delete them first",
    )
