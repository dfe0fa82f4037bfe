"""Backup verification (issue 36): a backup asked to be verified (the system annotation
``virtplane.io/verify-requested``, set by ``POST /v1/backups/NAME/verify`` or by its policy's
``verify_schedule``) has each disk's chain checked on its target through a host's driver
(``BackupOperations.verify_backup``: ``qemu-img check``/``compare`` on libvirt); the result,
with the request it answers, goes into ``status.verification``. A failure is a warning Event
and counts in ``virtplane_backup_verify_failures_total``; a backup that failed verification is
no longer a good one (retention does not count it, ``controllers.backup_policies``).

Its keys are backups' names under a kind of its own, so that a long check does not hold the
backup controller's key (as the migration follower's are VMs').
"""

from __future__ import annotations

import logging

from virtplane.controllers.backup_targets import target_driver, target_ref
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.registration import Registration
from virtplane.controllers.watch import Watch
from virtplane.domain.resources import (
    VERIFY_REQUESTED,
    BackupPhase,
    BackupTarget,
    BackupVerification,
    Resource,
    VerificationResult,
    VirtualMachineBackup,
)
from virtplane.drivers.errors import DriverError, PermanentError
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

log = logging.getLogger("virtplane.controllers.backup_verify")

KIND = "BackupVerify"


def verify_asked(backup: VirtualMachineBackup) -> str | None:
    """The request not yet answered, if any."""
    asked = backup.metadata.annotations.get(VERIFY_REQUESTED)
    done = backup.status.verification
    if not asked or (done is not None and done.requested == asked and done.result is not None):
        return None
    return asked


def chains(ctx: ControllerContext, backup: VirtualMachineBackup) -> tuple[tuple[str, ...], ...]:
    """Each disk's volumes on the target, the backup's own first, then those it reads through."""
    result = []
    for disk in backup.status.disks:
        chain, base_volume, base_name = [disk.backup_volume], disk.base_volume, backup.status.base
        while base_volume is not None:
            chain.append(base_volume)
            base = ctx.read(VirtualMachineBackup, base_name) if base_name else None
            below = (
                next((d for d in base.status.disks if d.backup_volume == base_volume), None) if base else None
            )
            if base is None or below is None:
                break  # the check finds the link the record no longer names
            base_volume, base_name = below.base_volume, base.status.base
        result.append(tuple(chain))
    return tuple(result)


class BackupVerifier:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        backup = ctx.read(VirtualMachineBackup, req.name, to_change=True)
        if backup is None or backup.metadata.deletion_requested_at is not None:
            return None
        asked = verify_asked(backup)
        if asked is None:
            return None
        target = ctx.read(BackupTarget, backup.spec.target)
        if backup.status.phase is not BackupPhase.SUCCEEDED:
            return await self._answer(
                backup, asked, False, f"the backup is {backup.status.phase.value}: nothing to verify"
            )
        if target is None:
            return await self._answer(
                backup, asked, False, f"backup target {backup.spec.target} does not exist"
            )
        try:
            driver = await target_driver(ctx, target, backup.status.host)
            if driver is None:
                return Result(requeue_after=5.0)
            check = await driver.verify_backup(target_ref(target), chains(ctx, backup))
        except PermanentError as exc:
            return await self._answer(backup, asked, False, f"could not verify: {exc}")
        except DriverError as exc:
            log.info("backup %s: verifying: %s; retrying", backup.metadata.name, exc)
            return Result(requeue_after=5.0)
        return await self._answer(backup, asked, check.ok, check.message)

    async def _answer(
        self, backup: VirtualMachineBackup, asked: str, ok: bool, message: str
    ) -> Result | None:
        ctx = self.ctx
        result = VerificationResult.OK if ok else VerificationResult.FAILED
        backup.status.verification = BackupVerification(
            requested=asked, verified_at=ctx.now(), result=result, message=message
        )
        if ok:
            ctx.event(backup, "Verified", message)
        else:
            ctx.metrics.backup_verify_failures.labels(vm=backup.spec.vm).inc()
            ctx.event(backup, "VerifyFailed", message, warning=True)
            ctx.event(
                ("VirtualMachine", backup.spec.vm),
                "BackupVerifyFailed",
                f"backup {backup.metadata.name}: {message}",
                warning=True,
            )
        await ctx.write(backup)
        return None


def _asked(_: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    if isinstance(new, VirtualMachineBackup) and verify_asked(new) is not None:
        return [Request(KIND, new.metadata.name)]
    return []


CONTROLLER = Registration(
    KIND,
    lambda parts: BackupVerifier(parts.ctx),
    (Watch(VirtualMachineBackup.KIND, _asked),),
    workers=2,  # a check reads whole disks: two at once keep the target's disks from thrashing
    looked_at_on_start=False,  # no stored objects of this kind: the backup controller's look on start wakes it
)
