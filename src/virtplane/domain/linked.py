"""Linked clones: a volume that is a qcow2 overlay on another (its backing file), not a copy.

A linked clone reads what its backing volume holds and writes only its own changes, so it is
made at once and takes little room; in exchange the backing volume must never change nor go
while a linked clone uses it. virtplane makes one only where that holds: the backing volume is
a disk of a template (which never runs) and of nothing else, is not a linked clone itself (no
chains), and is in a shared pool, the clone in the same pool (on a host's local pool a
migration would copy the overlay to a host without its backing file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from virtplane.domain.errors import Invalid, Refused
from virtplane.domain.resources import PoolKind, StoragePool, VirtualMachine, Volume

__all__ = ["backing_refusal", "linked_refusal"]


def linked_refusal(
    source: Volume, source_pool: StoragePool | None, target_pool: str, users: Iterable[VirtualMachine]
) -> Invalid | None:
    """Why a linked clone of ``source`` in ``target_pool`` is not made (``users``: the VMs that
    have ``source`` as a disk), or None."""
    name = source.metadata.name
    if source.spec.source is not None and source.spec.source.linked:
        return Invalid(
            "LinkedChain",
            f"volume {name} is a linked clone itself: a linked clone of it is not made (no chains)",
        )
    if target_pool != source.spec.pool:
        return Invalid(
            "LinkedAcrossPools",
            f"a linked clone lives in the pool of its backing volume {name} ({source.spec.pool}), not "
            f"{target_pool}; leave linked out for a full copy",
        )
    if source_pool is None or source_pool.spec.kind is not PoolKind.SHARED:
        return Invalid(
            "LinkedOnLocalPool",
            f"volume {name} is in a host's local pool {source.spec.pool}: a linked clone would lose its "
            "backing file when its VM migrates; leave linked out for a full copy",
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


def backing_refusal(name: str, clones: Sequence[str]) -> Refused | None:
    """Why the volume ``name`` cannot be deleted while the linked ``clones`` use it, or None."""
    if not clones:
        return None
    return Refused(
        "VolumeInUse",
        f"volume {name} is the backing file of linked clones {', '.join(clones)}: delete them first",
    )
