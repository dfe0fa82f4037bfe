"""New VMs from a blueprint: a spec and new volumes, or a template (a VM whose disks are copied).

``POST /v1/vms/actions/create`` and ``virtplane vm create`` make one VM or many at once.
Each VM gets its own volumes, named ``<vm>-<suffix>``: new ones (empty or copied from an
image), and, from a template, a full copy of each of the template's disks (a Volume with
``source.volume``). What identifies a machine is never copied: a clone's NICs get their MACs
derived from its own uid and the first free addresses, and its cloud-init instance id is its
uid, so a guest made from a copied disk runs cloud-init again as a new instance. Nor are the
template's annotations (the control plane's intents live there), its run policy (a template
is AlwaysOff) or its ``template`` flag.

A template is a VM with ``spec.template: true``: it never runs (admission holds it AlwaysOff
and Stopped), so its disks stay as they were when it became one. A stopped VM that is not a
template can be cloned too; a running one cannot (its disks change under the copy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from virtplane.domain.base import Metadata
from virtplane.domain.errors import Invalid, Refused
from virtplane.domain.names import BATCH_LABEL, DNS_LABEL
from virtplane.domain.resources import (
    BackupPhase,
    RunPolicy,
    SnapshotPhase,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineSnapshot,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumePhase,
    VolumeSource,
    VolumeSpec,
)

__all__ = [
    "CLONED_FROM",
    "CopySource",
    "NewVolume",
    "Planned",
    "backup_volumes",
    "check_template_change",
    "clone_source_refusal",
    "merge_patch",
    "plan_vms",
    "snapshot_volumes",
    "template_volumes",
]

CLONED_FROM = "virtplane.io/cloned-from"
"""Label of a VM made from a template, a stopped VM or a snapshot: its name (``-l virtplane.io/cloned-from=tmpl``)."""


@dataclass(frozen=True)
class NewVolume:
    """A volume each new VM gets, named ``<vm>-<suffix>``, attached as a disk."""

    suffix: str
    spec: VolumeSpec
    boot_order: int | None = None


@dataclass(frozen=True)
class CopySource:
    """What new VMs copy: a template's (or a stopped VM's) spec, or the one a snapshot captured."""

    name: str
    spec: VirtualMachineSpec


@dataclass(frozen=True)
class Planned:
    vm: VirtualMachine
    volumes: tuple[Volume, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` removes a key)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def clone_source_refusal(template: VirtualMachine, volumes: Mapping[str, Volume | None]) -> Refused | None:
    """Why ``template``'s disks cannot be copied now (``volumes``: its disks' Volumes by name), or None."""
    name = template.metadata.name
    if not template.spec.template and template.status.phase is not VMPhase.STOPPED:
        return Refused(
            "SourceNotStopped",
            f"VM {name} is {template.status.phase.value}: stop it first (its disks would change under "
            "the copy), or clone a snapshot of it",
        )
    for disk in template.spec.disks:
        volume = volumes.get(disk.volume)
        if volume is None:
            return Refused("VolumeNotFound", f"volume {disk.volume} of VM {name} does not exist")
        if volume.status.phase is not VolumePhase.READY:
            return Refused(
                "VolumeNotReady", f"volume {disk.volume} of VM {name} is {volume.status.phase.value}"
            )
        if volume.spec.source is not None and volume.spec.source.linked:
            return Refused(
                "LinkedSource",
                f"volume {disk.volume} of VM {name} is a linked clone: it is not copied (it needs its "
                f"backing file {volume.spec.source.volume}); copy the template it came from",
            )
    return None


def template_volumes(
    template: VirtualMachine, volumes: Mapping[str, Volume | None], *, linked: bool = False
) -> list[NewVolume]:
    """A copy of each disk of ``template``: same pool, same size, same boot order; full, or
    ``linked`` (an overlay on the template's disk, ``domain.linked``)."""
    name = template.metadata.name
    copies = []
    for index, disk in enumerate(template.spec.disks):
        source = volumes.get(disk.volume)
        if source is None:
            raise Invalid("VolumeNotFound", f"volume {disk.volume} of VM {name} does not exist")
        # web-tmpl-root -> <new vm>-root; a volume named otherwise -> <new vm>-disk<N>
        suffix = (
            disk.volume.removeprefix(f"{name}-") if disk.volume.startswith(f"{name}-") else f"disk{index}"
        )
        spec = VolumeSpec(
            pool=source.spec.pool,
            size_gib=max(source.spec.size_gib, source.status.size_gib),
            source=VolumeSource(volume=disk.volume, linked=linked),
        )
        copies.append(NewVolume(suffix, spec, disk.boot_order))
    return copies


def snapshot_volumes(
    snapshot: VirtualMachineSnapshot, volumes: Mapping[str, Volume | None], *, linked: bool = False
) -> tuple[CopySource, list[NewVolume]]:
    """A snapshot as a template: the spec it captured, and a copy of each disk as it saved it
    (a Volume with ``source: {snapshot, volume}``) in the pool of the volume it saved."""
    name = snapshot.metadata.name
    if snapshot.status.phase is not SnapshotPhase.READY or snapshot.status.captured is None:
        raise Refused("SnapshotNotReady", f"snapshot {name} is {snapshot.status.phase.value}, not Ready")
    captured = snapshot.status.captured.spec
    saved = {d.volume: d for d in snapshot.status.disk_snapshots}
    copies = []
    for index, disk in enumerate(captured.disks):
        original = volumes.get(disk.volume)
        if disk.volume not in saved or original is None:
            raise Refused(
                "SnapshotDiskMissing",
                f"snapshot {name}: disk {disk.volume} was not saved, or its volume (and pool) is gone",
            )
        suffix = _suffix(snapshot.spec.vm, disk.volume, index)
        spec = VolumeSpec(
            pool=original.spec.pool,
            size_gib=max(saved[disk.volume].size_gib, 1),
            source=VolumeSource(snapshot=name, volume=disk.volume, linked=linked),
        )
        copies.append(NewVolume(suffix, spec, disk.boot_order))
    return CopySource(name, captured), copies


def backup_volumes(
    backup: VirtualMachineBackup, volumes: Mapping[str, Volume | None], pool: str | None
) -> tuple[CopySource, list[NewVolume]]:
    """A backup as a template (a VM restored as a new one): the spec it captured, and a copy of
    each disk as it saved it (a Volume with ``source: {backup, volume}``) in ``pool``, else in
    the pool of the volume it saved (which may be gone: then ``pool`` is needed)."""
    name = backup.metadata.name
    if backup.status.phase is not BackupPhase.SUCCEEDED or backup.status.captured is None:
        raise Refused("BackupNotReady", f"backup {name} is {backup.status.phase.value}, not Succeeded")
    captured = backup.status.captured.spec
    saved = {d.volume: d for d in backup.status.disks}
    copies = []
    for index, disk in enumerate(captured.disks):
        original = volumes.get(disk.volume)
        into = pool or (original.spec.pool if original is not None else None)
        if disk.volume not in saved:
            raise Refused("BackupDiskMissing", f"backup {name} saved no disk of volume {disk.volume}")
        if into is None:
            raise Invalid("PoolRequired", f"pool: volume {disk.volume} is gone; name the pool for its copy")
        spec = VolumeSpec(
            pool=into,
            size_gib=max(1, -(-saved[disk.volume].size_bytes // 1024**3)),
            source=VolumeSource(backup=name, volume=disk.volume),
        )
        copies.append(NewVolume(_suffix(backup.spec.vm, disk.volume, index), spec, disk.boot_order))
    return CopySource(name, captured), copies


def _suffix(vm: str, volume: str, index: int) -> str:
    """web-1-root -> <new vm>-root; a volume named otherwise -> <new vm>-disk<N>"""
    return volume.removeprefix(f"{vm}-") if volume.startswith(f"{vm}-") else f"disk{index}"


def _fresh_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A template's spec without what identifies it: MACs and addresses, disks, the flag."""
    fresh = dict(spec)
    fresh["nics"] = [{k: v for k, v in nic.items() if k not in ("mac", "ip")} for nic in spec.get("nics", [])]
    fresh["disks"] = []
    fresh.pop("template", None)
    fresh.pop("run_policy", None)
    return fresh


def plan_vms(
    names: Sequence[str],
    *,
    spec_patch: Mapping[str, Any],
    new_volumes: Sequence[NewVolume],
    labels: Mapping[str, str],
    batch: str,
    source: CopySource | None = None,
    run_policy: RunPolicy | None = None,
) -> list[Planned]:
    """The VMs and volumes to create, one VM per name: ``source``'s spec (without what
    identifies it) or none, with ``spec_patch`` merged over it; the ``new_volumes`` attached
    as disks after whatever ``spec_patch`` lists. Raises ``Invalid`` for a spec that is not one
    (pydantic's message) or a name that makes a volume name too long."""
    base: dict[str, Any] = {}
    vm_labels = {**labels}
    if source is not None:
        base = _fresh_spec(source.spec.model_dump(mode="json"))
        vm_labels[CLONED_FROM] = source.name
    merged = merge_patch(base, dict(spec_patch))
    if run_policy is not None:
        merged["run_policy"] = run_policy.value
    planned = []
    for name in names:
        volumes = []
        disks = list(merged.get("disks", []))
        for new in new_volumes:
            volume_name = f"{name}-{new.suffix}"
            if not DNS_LABEL.matches(volume_name):
                raise Invalid(
                    "Invalid",
                    f"VM {name}: its volume's name {volume_name} is no DNS label (at most 63 characters)",
                )
            volumes.append(
                Volume(
                    metadata=Metadata(name=volume_name, labels={**labels, BATCH_LABEL: batch}),
                    spec=new.spec.model_copy(deep=True),
                )
            )
            disks.append({"volume": volume_name, "boot_order": new.boot_order})
        try:
            spec = VirtualMachineSpec.model_validate({**merged, "disks": disks})
            vm = VirtualMachine(
                metadata=Metadata(name=name, labels={**vm_labels, BATCH_LABEL: batch}),
                spec=spec,
            )
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(['spec', *(str(p) for p in e['loc'])])}: {e['msg'].removeprefix('Value error, ')}"
                for e in error.errors()
            )
            raise Invalid("Invalid", f"VM {name}: {problems}") from None
        planned.append(Planned(vm, tuple(volumes)))
    return planned


def check_template_change(current: VirtualMachine | None, new: VirtualMachine) -> None:
    """A template never runs: it is AlwaysOff, and a VM becomes one only while Stopped."""
    if not new.spec.template:
        return
    if new.spec.run_policy is not RunPolicy.ALWAYS_OFF:
        raise Invalid(
            "TemplateRuns",
            "spec.template: a template never runs; set spec.run_policy to AlwaysOff with it",
        )
    if current is not None and not current.spec.template and current.status.phase is not VMPhase.STOPPED:
        raise Refused(
            "NotStopped",
            f"VM {current.metadata.name} is {current.status.phase.value}: only a stopped VM becomes a template",
        )
