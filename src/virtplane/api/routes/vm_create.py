"""``POST /v1/vms/actions/create``: one VM or many at once, from a spec or from a template (clones).

What each VM gets is planned in the domain (``domain.clones``); here every object is
admitted and created as ``POST /v1/{plural}`` would (the same refusals, addresses chosen
by admission one VM after the other), each VM after its volumes, all labelled with
``virtplane.io/batch`` so that a client can watch them with one selector. Every name is
checked before anything is written: a name taken, a template that cannot be copied, or a
spec that is not one is the whole request's 4xx, with nothing created.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.routes.resources import DRY_RUN_HELP, admit_on_loop, create_as
from virtplane.api.shown import public_doc
from virtplane.domain.backup_restore import restore_refusal
from virtplane.domain.base import FreeJson, Name, Strict, StringMap
from virtplane.domain.clones import (
    CopySource,
    NewVolume,
    Planned,
    backup_volumes,
    clone_source_refusal,
    plan_vms,
    snapshot_volumes,
    template_volumes,
)
from virtplane.domain.errors import DomainError, Invalid
from virtplane.domain.linked import linked_refusal, saved_disk_refusal
from virtplane.domain.names import BATCH_LABEL
from virtplane.domain.resources import (
    RunPolicy,
    StoragePool,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineSnapshot,
    Volume,
    VolumeSpec,
)
from virtplane.store.errors import AlreadyExists

router = APIRouter(tags=["VirtualMachine"])

MAX_VMS = 100
"""VMs one request makes at most."""


class VolumeBlueprint(Strict):
    suffix: Name = Field(description="Each VM's copy is named <vm>-<suffix>, e.g. root.")
    spec: VolumeSpec
    boot_order: int | None = Field(default=None, ge=1, le=64)


class CreateVMs(Strict):
    names: list[Name] = Field(min_length=1, max_length=MAX_VMS, description="One VM of each name.")
    template: Name | None = Field(
        default=None,
        description="A VM to copy: a template (spec.template), or a stopped VM (a clone). Each new VM "
        "gets a full copy of each of its disks, its spec without its MACs and addresses, a new "
        "cloud-init instance id (its own uid), and none of its annotations.",
    )
    linked: bool = Field(
        default=False,
        description="With a template or a snapshot: each disk a linked clone (a qcow2 overlay whose backing "
        "file is the template's disk or the snapshot's saved one, in its shared pool) instead of a full "
        "copy; refused (422, saying why) where that cannot be made.",
    )
    snapshot: Name | None = Field(
        default=None,
        description="A VirtualMachineSnapshot to copy instead of a template: the spec it captured, and "
        "each disk as it saved it (in the pool of the volume it saved).",
    )
    backup: Name | None = Field(
        default=None,
        description="A VirtualMachineBackup to copy instead of a template (a VM restored as a new one): the "
        "spec it captured (new MACs and addresses), each disk as the backup saw it, read through its chain.",
    )
    pool: Name | None = Field(
        default=None,
        description="With a backup: the pool for the copies of its disks (default: the pool of each "
        "disk's volume, which must then still exist).",
    )
    spec: FreeJson = Field(
        default_factory=dict,
        description="The VMs' spec; with a template, a merge patch over the template's (e.g. "
        '{"cpu": 4, "memory_mib": "8Gi"}). Sizes take units.',
    )
    run_policy: RunPolicy | None = Field(
        default=None,
        description="The VMs' run policy (with a template: instead of AlwaysOff; default Manual, i.e. not started).",
    )
    volumes: list[VolumeBlueprint] = Field(
        default_factory=list,
        max_length=16,
        description="New volumes each VM gets, as disks after the template's.",
    )
    labels: StringMap = Field(default_factory=dict, description="On every VM and volume made.")


class CreatedVMs(BaseModel):
    items: list[dict[str, Any]] = Field(
        description="The objects as stored (dry run: as they would be): volumes, then their VM."
    )
    batch: str = Field(description=f"The value of the label {BATCH_LABEL} on every object made.")


def _template_of(ctx: ApiContext, name: str, linked: bool) -> tuple[CopySource, list[NewVolume]]:
    template = ctx.store.find(VirtualMachine, name)
    if template is None:
        raise Invalid("VMNotFound", f"template: VM {name} does not exist")
    volumes = {d.volume: ctx.store.find(Volume, d.volume) for d in template.spec.disks}
    refusal: DomainError | None = clone_source_refusal(template, volumes)
    for volume in volumes.values() if linked and refusal is None else ():
        assert volume is not None  # clone_source_refusal found each
        disk = volume.metadata.name
        users = [
            vm
            for vm in ctx.store.list_objects(VirtualMachine)
            if any(d.volume == disk for d in vm.spec.disks)
        ]
        pool = ctx.store.find(StoragePool, volume.spec.pool)
        refusal = refusal or linked_refusal(volume, pool, volume.spec.pool, users)
    if refusal is not None:
        raise refusal
    return CopySource(name, template.spec), template_volumes(template, volumes, linked=linked)


def _snapshot_of(ctx: ApiContext, name: str, linked: bool) -> tuple[CopySource, list[NewVolume]]:
    snapshot = ctx.store.find(VirtualMachineSnapshot, name)
    if snapshot is None:
        raise Invalid("SnapshotNotFound", f"snapshot: snapshot {name} does not exist")
    captured = snapshot.status.captured.spec.disks if snapshot.status.captured else []
    volumes = {d.volume: ctx.store.find(Volume, d.volume) for d in captured}
    source, copies = snapshot_volumes(snapshot, volumes, linked=linked)
    for copy in copies if linked else ():
        saved = copy.spec.source.volume if copy.spec.source else ""
        pool = ctx.store.find(StoragePool, copy.spec.pool)
        refusal = saved_disk_refusal(name, saved or "", pool, copy.spec.pool, copy.spec.pool)
        if refusal is not None:
            raise refusal
    return source, copies


def _backup_of(ctx: ApiContext, name: str, pool: str | None) -> tuple[CopySource, list[NewVolume]]:
    def find(backup: str) -> VirtualMachineBackup | None:
        return ctx.store.find(VirtualMachineBackup, backup)

    backup = find(name)
    if backup is None:
        raise Invalid("BackupNotFound", f"backup: backup {name} does not exist")
    refusal = restore_refusal(backup.spec.vm, name, [], find)
    if refusal is not None:
        raise refusal
    captured = backup.status.captured.spec.disks if backup.status.captured else []
    return backup_volumes(backup, {d.volume: ctx.store.find(Volume, d.volume) for d in captured}, pool)


def _plan(ctx: ApiContext, body: CreateVMs, batch: str) -> list[Planned]:
    if len(set(body.names)) != len(body.names):
        raise Invalid("Invalid", "names: a name is listed twice")
    if sum(1 for given in (body.template, body.snapshot, body.backup) if given) > 1:
        raise Invalid("Invalid", "give a template, a snapshot or a backup, not two of them")
    if body.pool and not body.backup:
        raise Invalid("Invalid", "pool: only with a backup (new volumes name their pool in volumes)")
    if body.backup and body.linked:
        raise Invalid("LinkedNeedsTemplate", "linked: a backup's disks are copied, never linked")
    source: CopySource | None = None
    copies: list[NewVolume] = []
    if body.linked and not (body.template or body.snapshot):
        raise Invalid(
            "LinkedNeedsTemplate",
            "linked: a linked clone is an overlay on a template's or a snapshot's disks",
        )
    if body.template:
        source, copies = _template_of(ctx, body.template, body.linked)
    elif body.snapshot:
        source, copies = _snapshot_of(ctx, body.snapshot, body.linked)
    elif body.backup:
        source, copies = _backup_of(ctx, body.backup, body.pool)
    blueprints = [*copies, *(NewVolume(v.suffix, v.spec, v.boot_order) for v in body.volumes)]
    # a copy never takes the template's AlwaysOff: the request's policy, its spec's, else Manual
    policy = body.run_policy or (
        RunPolicy.MANUAL if source is not None and "run_policy" not in body.spec else None
    )
    planned = plan_vms(
        body.names,
        spec_patch=body.spec,
        new_volumes=blueprints,
        labels=body.labels,
        batch=batch,
        source=source,
        run_policy=policy,
    )
    for plan in planned:
        for obj in (*plan.volumes, plan.vm):
            if ctx.store.find(type(obj), obj.metadata.name) is not None:
                raise AlreadyExists(obj.KIND, obj.metadata.name)
    return planned


async def create_vms_as(ctx: ApiContext, body: CreateVMs, dry_run: bool, principal: Principal) -> CreatedVMs:
    batch = uuid.uuid4().hex[:12]
    planned = await admit_on_loop(ctx, _plan, ctx, body, batch)
    items: list[dict[str, Any]] = []
    for plan in planned:
        for obj in (*plan.volumes, plan.vm):
            items.append(public_doc(await create_as(ctx, obj, dry_run, principal)))
    return CreatedVMs(items=items, batch=batch)


@router.post(
    "/v1/vms/actions/create",
    operation_id="create_vms_in_a_batch",
    status_code=201,
    summary="Create VMs with their volumes: from a spec, or copies of a template, a stopped VM, a snapshot or a backup",
    response_model=CreatedVMs,
)
async def create_vms(
    request: Request,
    body: CreateVMs = Body(...),
    dry_run: bool = Query(False, alias="dryRun", description=DRY_RUN_HELP),
    principal: Principal = Depends(require(Role.OPERATOR)),
) -> CreatedVMs:
    ctx: ApiContext = request.app.state.ctx
    return await create_vms_as(ctx, body, dry_run, principal)


__all__ = ["CreateVMs", "VolumeBlueprint", "create_vms_as", "router"]
