"""The VM reconcile's recovery step (issue 15), between ``decide`` and ``act``: a VM released
from a fenced host to start elsewhere takes a recovery slot of its cluster before it starts.

The intent (``virtplane.io/recovery``) was stored with the release, in the same write; it
holds a slot from the moment the slot is taken (written at once, before the start, so that
two reconciles never take the last slot twice) until the VM runs, and it goes when the
recovery is over: the VM runs (event ``Recovered``), or is no longer meant to run.
"""

from __future__ import annotations

from dataclasses import replace

from virtplane.controllers.chain import StopChain
from virtplane.controllers.scheduling import local_pool_hosts
from virtplane.controllers.vm.durable import DurablePoint
from virtplane.controllers.vm.state import VMState
from virtplane.domain.intents import RecoveryStage, read_intents
from virtplane.domain.phases import RECOVERY_END_PHASES
from virtplane.domain.power import PowerAction
from virtplane.domain.recovery import Candidate, Recovery, StorageKind, admitted, queue_position
from virtplane.domain.recovery import recovery as recovery_of
from virtplane.domain.resources import HostConnection, VirtualMachine, VMPhase
from virtplane.reconcile.types import Result
from virtplane.runtime.cache import Cache

POLL_SLOT_S = 1.0

__all__ = ["recovery", "slot_queue"]


def slot_queue(cache: Cache, cluster: str) -> tuple[list[Candidate], int]:
    """The VMs waiting for a recovery slot of ``cluster`` (also those of its fenced hosts not
    released yet, so that the order does not depend on which VM was looked at first), and
    how many hold one."""
    fenced = {h.metadata.name for h in cache.hosts() if h.spec.fenced and h.spec.cluster == cluster}
    waiting, starting = [], 0
    for vm in cache.vms():
        intent = read_intents(vm.metadata.annotations).recovery
        if intent is None:
            if vm.status.host in fenced and _will_restart(cache, vm):
                waiting.append(Candidate(vm.metadata.name, vm.spec.recovery_priority))
            continue
        if intent.cluster != cluster:
            continue
        if intent.stage is RecoveryStage.STARTING:
            starting += 1
        else:
            waiting.append(Candidate(vm.metadata.name, vm.spec.recovery_priority))
    return waiting, starting


def _will_restart(cache: Cache, vm: VirtualMachine) -> bool:
    """A VM of a fenced host that its release will send to start elsewhere (see steps.host)."""
    local = local_pool_hosts(cache, vm) is not None
    storage = StorageKind.LOCAL if local else StorageKind.SHARED
    release = recovery_of(vm.spec.run_policy, storage, HostConnection.DOWN)
    return release is Recovery.RESTART_ELSEWHERE and vm.status.phase is not VMPhase.STOPPED


async def recovery(state: VMState) -> Result | None:
    intent = state.intents.recovery
    decision = state.decision
    if intent is None or decision is None:
        return None
    ctx = state.ctx
    if decision.phase in RECOVERY_END_PHASES and decision.action is PowerAction.NONE:
        state.intents = state.intents.with_(recovery=None)
        if decision.phase is VMPhase.RUNNING:
            ctx.event(
                state.vm, "Recovered", f"runs on {state.status.host} after host {intent.from_host} failed"
            )
        return None  # the slot (or place in the queue) is free: see watches.py
    if intent.stage is RecoveryStage.STARTING or decision.action is not PowerAction.START:
        return None
    waiting, starting = slot_queue(ctx.cache, intent.cluster)
    limit = ctx.settings.get_int("host.recovery.max_starting_per_cluster")
    if state.name in admitted(waiting, starting, limit):
        state.intents = state.intents.with_(recovery=replace(intent, stage=RecoveryStage.STARTING))
        ctx.event(
            state.vm,
            "RecoveryStarted",
            f"host {intent.from_host} failed: starting elsewhere (slot {starting + 1} of {limit} "
            f"in cluster {intent.cluster}, priority {state.vm.spec.recovery_priority})",
            warning=True,
        )
        await state.durable(DurablePoint.RECOVERY_SLOT)
        return None
    ahead = queue_position(waiting, state.name)
    state.status.phase = VMPhase.PENDING
    state.status.message = (
        f"host {intent.from_host} failed: waiting for a recovery slot in cluster {intent.cluster} "
        f"({starting} of {limit} starting, {ahead} ahead by priority)"
    )
    raise StopChain(Result(requeue_after=POLL_SLOT_S))
