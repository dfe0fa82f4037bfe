"""The VM reconcile's steps before the power decision: migration, deletion, finalizer, disks,
host, observe. Each reads and changes only the ``VMState``; the order is ``ORDER`` in
``reconciler.py``."""

from __future__ import annotations

import logging

from virtplane.controllers.chain import StopChain
from virtplane.controllers.context import Removal
from virtplane.controllers.registration import MIGRATION_KIND
from virtplane.controllers.scheduling import local_pool_hosts
from virtplane.controllers.vm.durable import CRASH_POINTS, DurablePoint
from virtplane.controllers.vm.state import VMState
from virtplane.crashpoints import crashpoint
from virtplane.domain.conditions import VMCondition, place, remove_condition, set_condition, unplace
from virtplane.domain.intents import MigrationIntent, RecoveryStage, read_migration
from virtplane.domain.intents import Recovery as RecoveryIntent
from virtplane.domain.networks import nic_statuses
from virtplane.domain.phases import LIVE_STATES, UP_PHASES, DomainState
from virtplane.domain.recovery import Recovery, StorageKind, recovery
from virtplane.domain.resources import (
    ExitReason,
    FencePhase,
    Host,
    HostConnection,
    VirtualMachine,
    VirtualMachineStatus,
    VMPhase,
)
from virtplane.drivers.errors import DriverError, HostUnreachable, ImageRefused, NotFound
from virtplane.reconcile.types import Result

log = logging.getLogger("virtplane.controllers.vm")

FINALIZER = "virtplane.io/domain"
POLL_TRANSITION_S = 1.0
POLL_UNREACHABLE_S = 5.0
POLL_UNSCHEDULABLE_S = 10.0
RELEASED_S = 0.01  # released from a fenced host: decide again at once


async def migration(state: VMState) -> Result | None:
    """A migration is in flight: its controller owns the domain and finalises status.host."""
    intent = read_migration(state.vm.metadata.annotations)
    if intent is None:
        return None
    state.ctx.enqueue(MIGRATION_KIND, state.name)
    show_migrating(state.status, intent)
    raise StopChain(Result(requeue_after=POLL_TRANSITION_S))


def show_migrating(status: VirtualMachineStatus, intent: MigrationIntent) -> None:
    """What a VM shows while a migration is in flight. The coordinator writes it with the intent,
    so the VM's look after that write has nothing to write."""
    status.phase = VMPhase.MIGRATING
    status.message = intent.describe()


async def deletion(state: VMState) -> Result | None:
    """Deleted: remove the domain, then the finalizer; the store then drops the VM."""
    vm = state.vm
    if vm.metadata.deletion_requested_at is None:
        return None
    access = await state.host()
    if access.host is not None and access.driver is None:
        state.ctx.event(
            vm,
            "DeletionWaiting",
            f"waiting for its host to remove the domain: {access.problem}",
            warning=True,
        )
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S))
    if access.driver is not None:
        await access.driver.destroy(state.domain)
        await access.driver.undefine(state.domain)
    if not await state.delete_seeds():
        state.ctx.event(vm, "DeletionWaiting", "waiting for a host that sees its seed's pool", warning=True)
        await state.save()
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S))
    if FINALIZER in state.finalizers:
        state.finalizers.remove(FINALIZER)
        await state.durable(DurablePoint.FINALIZER_REMOVED)
    if not state.finalizers:
        state.ctx.event(vm, "Deleted", "domain removed and VM deleted")
        await state.ctx.write(Removal(VirtualMachine, vm.metadata.name))
        state.gone = True
    raise StopChain()


async def finalizer(state: VMState) -> Result | None:
    """Any domain defined from here on is removed before the VM is (durable at DEFINE/START)."""
    if FINALIZER not in state.finalizers:
        state.finalizers.append(FINALIZER)
    return None


async def disks(state: VMState) -> Result | None:
    problem = state.disks()[1]
    state.status.conditions = (
        set_condition(
            state.status.conditions, VMCondition.DISKS_READY, False, "DiskNotReady", problem, now=state.now
        )
        if problem
        else set_condition(state.status.conditions, VMCondition.DISKS_READY, True, "Ready", now=state.now)
    )
    return None


async def host(state: VMState) -> Result | None:
    """The host must answer; when it does not, the recovery table decides (DESIGN.md §3, host
    down): wait for it, or, once it is fenced, release the VM to run elsewhere or stay stopped."""
    access = await state.host()
    status = state.status
    if not access.problem:
        status.conditions = remove_condition(status.conditions, VMCondition.HOST_REACHABLE)
        return None
    failed = access.host
    if failed is None:
        status.conditions = set_condition(
            status.conditions,
            VMCondition.HOST_REACHABLE,
            False,
            "HostUnreachable",
            access.problem,
            now=state.now,
        )
        return None  # no host recorded: placement happens at the start
    local = local_pool_hosts(state.ctx.cache, state.vm) is not None
    action = recovery(
        state.vm.spec.run_policy,
        StorageKind.LOCAL if local else StorageKind.SHARED,
        HostConnection.DOWN if failed.spec.fenced else failed.status.connection,
    )
    if action is Recovery.WAIT:  # the host may still run the VM: wait, never guess
        reason, message = waiting_for(failed, local, access.problem)
        status.conditions = set_condition(
            status.conditions, VMCondition.HOST_REACHABLE, False, reason, message, now=state.now
        )
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S))
    # The host is confirmed off: what ran there died with it. Released from the host, the run
    # policy decides: start elsewhere (in its turn, see recovery.py), or stay stopped.
    name = failed.metadata.name
    if status.phase is not VMPhase.STOPPED:
        status.last_exit = ExitReason.HOST_FAILURE
        status.last_exit_at = state.now
        if action is Recovery.RESTART_ELSEWHERE:
            stage = RecoveryIntent(RecoveryStage.WAITING, failed.spec.cluster, name)
            state.intents = state.intents.with_(recovery=stage)
    unplace(status, "HostFenced", f"released from host {name}, which is fenced", now=state.now)
    status.phase = VMPhase.STOPPED
    status.conditions = remove_condition(status.conditions, VMCondition.HOST_REACHABLE)
    outcome = "to start elsewhere" if state.intents.recovery else "it stays stopped"
    state.ctx.event(
        state.vm, "HostFenced", f"host {name} is fenced: the VM is released from it, {outcome}", warning=True
    )
    raise StopChain(Result(requeue_after=RELEASED_S))


def waiting_for(host: Host, local: bool, problem: str) -> tuple[str, str]:
    """Why a VM of an unreachable host waits: the reason and message of its HostReachable."""
    name, fence = host.metadata.name, host.status.fence
    if host.spec.fenced and local:
        return "WaitingForHost", f"host {name} is fenced and holds a disk of the VM: it waits for the host"
    if fence is not None and fence.phase is FencePhase.RETRYING:
        return fence.reason, f"host {name} could not be fenced: {fence.message}"
    if fence is not None and fence.phase is FencePhase.POWERING_OFF:
        return "Fencing", f"host {name}: {fence.message}"
    if host.status.connection is HostConnection.DISCONNECTED and not (
        host.spec.fencing and host.spec.fencing.redfish
    ):
        return (
            "WaitingForFence",
            f"host {name} is Disconnected ({problem}); it has no spec.fencing: the VM waits until the "
            "host answers or an admin confirms it is off (spec.fenced: true)",
        )
    return "HostUnreachable", problem


async def observe(state: VMState) -> Result | None:
    """Read the domain; define it where it is missing (where a restore's power intent gets
    consumed: after the domain exists again); redefine an off domain whose spec changed."""
    driver = (await state.host()).driver
    if driver is None:
        if state.status.host is None:
            await _locate_unplaced(state)
        state.status.observed_generation = state.vm.metadata.generation
        return None
    problem = state.disks()[1]
    try:
        info = await driver.get_info(state.domain)
        if info is not None and info.migrated_away:
            await _migrated_away(state)
            info = None
        if info is None and not problem and not state.intents.held_by:
            await _locate(state)
            await state.durable(DurablePoint.DEFINE)
            await state.define(driver)
            crashpoint(CRASH_POINTS[DurablePoint.DEFINE])
            info = await driver.get_info(state.domain)
        elif (
            info is not None
            and info.state is DomainState.SHUTOFF
            and not problem
            and state.vm.metadata.generation != state.status.observed_generation
        ):
            await state.define(driver)
    except HostUnreachable as exc:
        state.status.conditions = set_condition(
            state.status.conditions,
            VMCondition.HOST_REACHABLE,
            False,
            "HostUnreachable",
            str(exc),
            now=state.now,
        )
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S)) from None
    except (ImageRefused, NotFound) as exc:  # a boot image the host does not have, or refuses
        state.status.conditions = set_condition(
            state.status.conditions, VMCondition.DISKS_READY, False, "ImageRefused", str(exc), now=state.now
        )
        raise StopChain(Result(requeue_after=POLL_UNSCHEDULABLE_S)) from None
    state.info = info
    if info is not None and info.state is DomainState.SHUTOFF:
        state.status.observed_generation = state.vm.metadata.generation
    return None


async def _migrated_away(state: VMState) -> None:
    """The domain left its host by live migration though no migration is recorded: find where
    it runs before anything could start a second copy here; if it runs nowhere, remove the
    leftover and let the policy decide."""
    found, unasked = await _find_elsewhere(state)
    if found is not None:
        state.ctx.event(state.vm, "Located", f"the domain runs on {found}, not {state.status.host}")
        place(state.status, found, "Located", now=state.now)
        raise StopChain(Result(requeue_after=RELEASED_S))
    if unasked:
        state.status.message = f"it left {state.status.host} by migration; cannot ask {unasked}"
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S))
    driver = (await state.host()).driver
    assert driver is not None
    await driver.undefine(state.domain)


async def _locate(state: VMState) -> None:
    """Its host has no domain for the VM: before one is defined there (and maybe started), ask
    the other hosts. The store may place the VM where it no longer is (restored from a backup,
    or a domain moved behind the control plane's back): until its location is known, nothing
    defines or starts it anywhere (DESIGN.md §7). Found: the VM is adopted where it is."""
    recorded = state.status.host
    found, unasked = await _find_elsewhere(state, defined_too=True)
    if found is not None:
        state.ctx.event(
            state.vm,
            "FoundOnOtherHost",
            f"the store placed it on {recorded}; its domain is on {found}: adopted there",
            warning=True,
        )
        place(state.status, found, "FoundOnOtherHost", now=state.now)
        raise StopChain(Result(requeue_after=RELEASED_S))
    if unasked:
        state.status.message = f"its domain is not on {recorded}; cannot ask {unasked} whether it is there"
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S))
    if state.status.phase in UP_PHASES:
        state.ctx.event(
            state.vm,
            "DomainMissing",
            f"it was {state.status.phase.value} on {recorded}, and no host has its domain: defined again there",
            warning=True,
        )


async def _locate_unplaced(state: VMState) -> None:
    """A VM on no host is placed afresh; before that, once per process, one created before this
    process began is looked for in the census of the hosts' domains (``domain_survey``): a store
    restored from a backup taken before its first placement knows no host for a VM that runs
    since. A VM created later cannot have a domain yet (its host is recorded before its domain
    is defined), so new VMs never wait here."""
    ctx, uid, created = state.ctx, state.vm.metadata.uid, state.vm.metadata.created_at
    if uid in ctx.looked_for or (created is not None and created >= ctx.started_at) or state.intents.held_by:
        return
    # a host that cannot be listed may run it: wait for it, unless it is confirmed off (fenced)
    unseen = sorted(
        h.metadata.name
        for h in ctx.cache.hosts()
        if h.metadata.name not in ctx.surveyed and not _confirmed_off(h)
    )
    if unseen:
        state.status.message = (
            f"it is on no host in the store; waiting for a first look at {', '.join(unseen)}"
        )
        raise StopChain(Result(requeue_after=POLL_TRANSITION_S))
    ctx.looked_for.add(uid)
    found = ctx.census.get(uid)
    if found is not None:
        ctx.event(
            state.vm,
            "FoundOnOtherHost",
            f"the store placed it nowhere; its domain is on {found}: adopted there",
        )
        # its next look reads the domain there (and looks further if gone)
        place(state.status, found, "FoundOnOtherHost", now=state.now)
        raise StopChain(Result(requeue_after=RELEASED_S))


def _confirmed_off(host: Host) -> bool:
    """Fenced by an admin, or by the fencer once its BMC confirmed the power off (Down)."""
    return host.spec.fenced or host.status.connection is HostConnection.DOWN


async def _find_elsewhere(state: VMState, *, defined_too: bool = False) -> tuple[str | None, str]:
    """The other host where the VM's domain is live (with ``defined_too``, else one where it is
    defined), asking every host (a rare path), and the hosts that could not be asked ("" when
    all answered; a host confirmed off, fenced, runs nothing and need not be asked)."""
    from virtplane.controllers.lookup import host_driver

    unasked = []
    defined_on = None
    for other in state.ctx.cache.hosts():
        if other.metadata.name == state.status.host:
            continue
        _, driver, _ = await host_driver(state.ctx, other.metadata.name)
        try:
            info = await driver.get_info(state.domain) if driver is not None else None
        except DriverError:
            driver = None
        if driver is None:
            if not _confirmed_off(other):
                unasked.append(other.metadata.name)
        elif info is not None and info.state in LIVE_STATES:
            return other.metadata.name, ""
        elif info is not None and defined_too:
            defined_on = defined_on or other.metadata.name
    if unasked:
        return None, ", ".join(sorted(unasked))
    return defined_on, ""


__all__ = [
    "FINALIZER",
    "deletion",
    "disks",
    "finalizer",
    "host",
    "migration",
    "nics",
    "observe",
    "waiting_for",
]


async def nics(state: VMState) -> Result | None:
    """``status.nics`` from the NICs the API filled in and their networks' subnets."""
    specs = {n.metadata.name: n.spec for n in state.ctx.cache.networks()}
    state.status.nics = nic_statuses(state.vm.spec.nics, specs)
    return None
