"""The backup policy controller (issue 36), leader-side like every controller: when the
policy's schedule fires, the VMs its selector picks are backed up, as many at once as its limits
per host and per target let (``domain.backups.admit``), the rest at the next looks; after each
backup ends, its retention removes the policy's backups it no longer keeps
(``domain.backup_policies.expired``: never a base a kept backup reads through), each through
the backup controller's deletion (files on the target first, then the record).

A window is served once: the policy records it (and the VMs it picks) before any backup of it
is made, and each backup's name comes from the VM and the window, so a look after a crash makes
the same backups, not twins. A window is *missed*, in the status and as a warning Event, when it
was not started within ``start_window_minutes`` (the control plane was down) or when the next
window came while some of its VMs were still held back by the limits.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime, timedelta

from virtplane.controllers.backups import CHECKPOINT_PREFIX, checkpoint_name
from virtplane.controllers.context import ControllerContext, Removal
from virtplane.controllers.registration import Registration
from virtplane.controllers.watch import Watch, itself
from virtplane.domain.backup_policies import KeptBackup, Outcome, expired, policy_backup_name
from virtplane.domain.backups import PendingBackup, ScheduleState, admit, schedule_due
from virtplane.domain.phases import LIVE_PHASES
from virtplane.domain.resources import (
    POLICY_LABEL,
    VERIFY_REQUESTED,
    BackupPhase,
    BackupPolicy,
    BackupPolicyStatus,
    BackupTarget,
    Metadata,
    Resource,
    VerificationResult,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineBackupSpec,
)
from virtplane.domain.selectors import parse_label_selector
from virtplane.drivers.base import domain_name
from virtplane.drivers.errors import DriverError
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache
from virtplane.store.errors import AlreadyExists

log = logging.getLogger("virtplane.controllers.backup_policies")

WAITING_S = 2.0
"""A look again while VMs of the window wait for room (a backup's end wakes it sooner)."""
MAX_SLEEP_S = 60.0
"""The longest a policy waits between looks: a wall clock that jumps is caught within a minute."""
IN_PROGRESS = (BackupPhase.PENDING, BackupPhase.RUNNING)


def outcome(backup: VirtualMachineBackup) -> Outcome:
    if backup.status.phase in IN_PROGRESS:
        return Outcome.IN_PROGRESS
    check = backup.status.verification
    if backup.status.phase is BackupPhase.SUCCEEDED and (
        check is None or check.result is not VerificationResult.FAILED
    ):
        return Outcome.GOOD
    return Outcome.FAILED


def _taken_at(backup: VirtualMachineBackup) -> datetime:
    return backup.status.started_at or backup.metadata.created_at or datetime.min.replace(tzinfo=UTC)


def policy_of(backup: VirtualMachineBackup) -> str | None:
    return backup.metadata.labels.get(POLICY_LABEL)


class BackupPolicyReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        policy = ctx.read(BackupPolicy, req.name, to_change=True)
        if policy is None or policy.metadata.deletion_requested_at is not None:
            return None  # its backups stay: they are the VMs' now, pruned by hand
        now = ctx.now()
        status = policy.status.model_copy(deep=True)
        spec = policy.spec
        decision = schedule_due(
            spec.schedule,
            last_fired=status.window,
            created_at=policy.metadata.created_at or now,
            now=now,
            start_window=timedelta(minutes=spec.start_window_minutes),
        )
        status.next_run = decision.next_at
        if decision.state is not ScheduleState.WAIT and decision.fire_at is not None:
            if status.waiting:
                self._missed(
                    policy,
                    status,
                    status.window,
                    f"{len(status.waiting)} VM(s) of the window at {_at(status.window)} had not begun when "
                    f"the next came (limits: {spec.max_per_host} per host, {spec.max_per_target} per "
                    f"target): {', '.join(status.waiting[:5])}",
                )
            if decision.state is ScheduleState.MISSED:
                status.window, status.waiting = decision.fire_at, []
                self._missed(
                    policy,
                    status,
                    decision.fire_at,
                    f"the window at {_at(decision.fire_at)} was not started within "
                    f"{spec.start_window_minutes} min (the control plane was down); the next is at "
                    f"{_at(decision.next_at)}",
                )
            else:
                status.window, status.last_run = decision.fire_at, now
                status.waiting = self._selected(policy)
                ctx.event(
                    policy,
                    "WindowStarted",
                    f"the window at {_at(decision.fire_at)}: {len(status.waiting)} VM(s) to back up",
                )
            # the window and its VMs are stored before any backup of it is made
            policy.status = status
            policy = await ctx.durable("backuppolicy.window", policy)
            if decision.state is ScheduleState.RUN:
                await self._sweep_checkpoints(policy)
            status = policy.status.model_copy(deep=True)
        if status.waiting and status.window is not None:
            await self._start(policy, status, status.window)
        await self._prune(policy, status)
        verify_at = await self._verify(policy, status, now)
        self._count(policy, status)
        if status != policy.status:
            policy.status = status
            await ctx.write(policy)
        if status.waiting:
            return Result(requeue_after=WAITING_S)
        until = (min(decision.next_at, verify_at or decision.next_at) - now).total_seconds()
        return Result(requeue_after=min(MAX_SLEEP_S, max(1.0, until)))

    def _selected(self, policy: BackupPolicy) -> list[str]:
        selector = parse_label_selector(policy.spec.selector)
        return sorted(
            vm.metadata.name
            for vm in self.ctx.cache.vms()
            if vm.metadata.deletion_requested_at is None and selector.matches(vm.metadata.labels)
        )

    def _missed(
        self, policy: BackupPolicy, status: BackupPolicyStatus, window: datetime | None, reason: str
    ) -> None:
        status.missed_windows += 1
        status.last_missed, status.last_missed_reason = window, reason
        self.ctx.event(policy, "MissedWindow", reason, warning=True)

    async def _sweep_checkpoints(self, policy: BackupPolicy) -> None:
        """Drop the backup checkpoints on the selected VMs' domains that no backup record knows
        (a record gone without its controller: a store restored from an older copy, a finalizer
        removed by hand): each is a dirty bitmap that slows the guest's writes for ever."""
        ctx = self.ctx
        known = {checkpoint_name(b) for b in ctx.cache.backups()}
        for name in policy.status.waiting:
            vm = ctx.read(VirtualMachine, name)
            host = ctx.cache.host(vm.status.host) if vm is not None and vm.status.host else None
            if vm is None or host is None or vm.status.phase not in LIVE_PHASES:
                continue
            try:
                driver = await ctx.hosts.get(host.spec.uri)
                dname = domain_name(vm.metadata.uid)
                for checkpoint in await driver.checkpoints(dname):
                    if checkpoint.startswith(CHECKPOINT_PREFIX) and checkpoint not in known:
                        await driver.delete_checkpoint(dname, checkpoint)
                        ctx.event(
                            vm, "CheckpointOrphaned", f"checkpoint {checkpoint}: no backup knows it; dropped"
                        )
            except DriverError as exc:  # the next window looks again
                log.info("VM %s: checkpoints not swept: %s", name, exc)

    # ------------------------------------------------------------------ starting backups

    async def _start(self, policy: BackupPolicy, status: BackupPolicyStatus, window: datetime) -> None:
        ctx, spec = self.ctx, policy.spec
        target = ctx.read(BackupTarget, spec.target)
        if target is None or target.metadata.deletion_requested_at is not None:
            status.message = f"backup target {spec.target} does not exist: {len(status.waiting)} VM(s) wait"
            return
        vms = {name: ctx.read(VirtualMachine, name) for name in status.waiting}
        status.waiting = [name for name, vm in vms.items() if vm is not None]
        running: list[PendingBackup] = []
        busy: set[str] = set()
        for b in ctx.cache.backups():
            if b.status.phase in IN_PROGRESS and b.metadata.deletion_requested_at is None:
                host = b.status.host or _host(ctx.read(VirtualMachine, b.spec.vm))  # Pending: its VM's
                running.append(PendingBackup(b.spec.vm, host, b.spec.target))
                busy.add(b.spec.vm)
        pending = [
            PendingBackup(name, _host(vms[name]), spec.target) for name in status.waiting if name not in busy
        ]
        started = admit(pending, running, per_host=spec.max_per_host, per_target=spec.max_per_target)
        for p in started:
            name = policy_backup_name(p.vm, window)
            with contextlib.suppress(AlreadyExists):  # made by a look before a crash
                ctx.create(
                    VirtualMachineBackup(
                        metadata=Metadata(name=name, labels={POLICY_LABEL: policy.metadata.name}),
                        spec=VirtualMachineBackupSpec(vm=p.vm, target=spec.target),
                    )
                )
            status.waiting.remove(p.vm)
        if status.waiting:
            status.message = f"{len(status.waiting)} VM(s) wait for room (limits per host and per target)"
        else:
            status.message = f"the window at {_at(window)} began all its backups"

    # ------------------------------------------------------------------ verification

    async def _verify(
        self, policy: BackupPolicy, status: BackupPolicyStatus, now: datetime
    ) -> datetime | None:
        """On ``verify_schedule``: ask for a verification of each VM's newest good backup of this
        policy (``controllers.backup_verify`` does it); when it fires next."""
        schedule = policy.spec.verify_schedule
        if schedule is None:
            return None
        decision = schedule_due(
            schedule,
            last_fired=status.verify_window,
            created_at=policy.metadata.created_at or now,
            now=now,
            start_window=timedelta(minutes=policy.spec.start_window_minutes),
        )
        if decision.fire_at is None:
            return decision.next_at
        status.verify_window = decision.fire_at
        if decision.state is ScheduleState.MISSED:
            return decision.next_at  # a verification is not worth a warning: the next one comes
        newest: dict[str, VirtualMachineBackup] = {}
        for b in self.ctx.cache.backups():
            if policy_of(b) != policy.metadata.name or outcome(b) is not Outcome.GOOD:
                continue
            if b.spec.vm not in newest or _taken_at(newest[b.spec.vm]) < _taken_at(b):
                newest[b.spec.vm] = b
        asked = f"{policy.metadata.name}@{decision.fire_at.isoformat()}"
        for b in newest.values():
            ask = self.ctx.read(VirtualMachineBackup, b.metadata.name, to_change=True)
            if ask is not None and ask.metadata.annotations.get(VERIFY_REQUESTED) != asked:
                ask.metadata.annotations[VERIFY_REQUESTED] = asked
                await self.ctx.write(ask)
        self.ctx.event(policy, "VerifyStarted", f"{len(newest)} backup(s) to verify")
        return decision.next_at

    # ------------------------------------------------------------------ retention

    async def _prune(self, policy: BackupPolicy, status: BackupPolicyStatus) -> None:
        ctx, name = self.ctx, policy.metadata.name
        by_vm: dict[str, list[VirtualMachineBackup]] = {}  # one pass: a fleet holds many backups
        for b in ctx.cache.backups():
            if b.spec.target == policy.spec.target and b.metadata.deletion_requested_at is None:
                by_vm.setdefault(b.spec.vm, []).append(b)
        retention = policy.spec.retention.rule()
        for vm, backups in sorted(by_vm.items()):
            if not any(policy_of(b) == name for b in backups):
                continue
            kept = [
                KeptBackup(b.metadata.name, _taken_at(b), outcome(b), policy_of(b) == name, b.status.base)
                for b in backups
            ]
            for expiry in expired(kept, retention):
                held = ctx.read(VirtualMachineBackup, expiry.name)
                if held is None or held.metadata.deletion_requested_at is not None:
                    continue  # asked before (ctx.write of a Removal puts it in the cache at once)
                ctx.event(policy, "Pruned", f"backup {expiry.name} of VM {vm}: {expiry.reason}")
                await ctx.write(Removal(VirtualMachineBackup, expiry.name))
                status.pruned += 1

    def _count(self, policy: BackupPolicy, status: BackupPolicyStatus) -> None:
        mine = [
            b
            for b in self.ctx.cache.backups()
            if policy_of(b) == policy.metadata.name and b.metadata.deletion_requested_at is None
        ]
        status.backups = len(mine)
        status.succeeded = sum(outcome(b) is Outcome.GOOD for b in mine)
        status.failed = sum(outcome(b) is Outcome.FAILED for b in mine)
        status.running = sum(outcome(b) is Outcome.IN_PROGRESS for b in mine)


def _host(vm: VirtualMachine | None) -> str | None:
    if vm is None or vm.status.phase not in LIVE_PHASES:
        return None
    return vm.status.host or None


def _at(moment: datetime | None) -> str:
    if moment is None:
        return "?"
    return moment.strftime("%Y-%m-%d %H:%M UTC" if moment.second == 0 else "%Y-%m-%d %H:%M:%S UTC")


def _policies_of_backup(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A backup that comes, goes or ends: its policy prunes; policies whose VMs wait for room look."""
    if (
        isinstance(old, VirtualMachineBackup)
        and isinstance(new, VirtualMachineBackup)
        and (old.status.phase, old.metadata.deletion_requested_at)
        == (new.status.phase, new.metadata.deletion_requested_at)
    ):
        return []
    names = {p for b in (old, new) if isinstance(b, VirtualMachineBackup) and (p := policy_of(b))}
    names.update(p.metadata.name for p in cache.objects(BackupPolicy) if p.status.waiting)
    return [Request(BackupPolicy.KIND, n) for n in sorted(names)]


CONTROLLER = Registration(
    BackupPolicy.KIND,
    lambda parts: BackupPolicyReconciler(parts.ctx),
    (
        itself(BackupPolicy.KIND, after_own_writes=False),
        Watch(VirtualMachineBackup.KIND, _policies_of_backup, batch_s=0.5),
    ),
)
