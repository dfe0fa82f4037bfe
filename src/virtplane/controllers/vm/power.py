"""The VM reconcile's last two steps: ``decide`` (the pure run-policy decision applied to the
state) and ``act`` (at most one driver action, after its durable point)."""

from __future__ import annotations

import logging
from datetime import timedelta

from virtplane.controllers.chain import StopChain
from virtplane.controllers.scheduling import start_choice
from virtplane.controllers.vm.durable import CRASH_POINTS, DurablePoint
from virtplane.controllers.vm.memory import start_domain
from virtplane.controllers.vm.state import HostAccess, VMState
from virtplane.controllers.vm.steps import POLL_TRANSITION_S, POLL_UNREACHABLE_S, POLL_UNSCHEDULABLE_S
from virtplane.crashpoints import crashpoint
from virtplane.domain import power
from virtplane.domain.conditions import VMCondition, remove_condition, set_condition, unplace
from virtplane.domain.host_states import accepts_vms
from virtplane.domain.phases import TRANSITION_PHASES, UP_PHASES, DomainState
from virtplane.domain.placement import explain
from virtplane.domain.power import PowerAction, PowerDecision, PowerInputs, start_retry_delay
from virtplane.domain.resources import ExitReason, HostConnection, VMPhase
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import DriverError, NotFound, PermanentError
from virtplane.reconcile.types import Result

log = logging.getLogger("virtplane.controllers.vm")

WARNING_EXITS = frozenset(
    {ExitReason.CRASH, ExitReason.START_FAILED, ExitReason.VANISHED, ExitReason.HOST_FAILURE}
)


def power_inputs(state: VMState) -> PowerInputs:
    info, status = state.info, state.status
    grace = timedelta(seconds=state.vm.spec.termination_grace_period_s)
    return PowerInputs(
        run_policy=state.vm.spec.run_policy,
        domain_state=info.state.value if info else None,
        exit_reason=info.exit_reason if info else None,
        last_exit=status.last_exit,
        intents=state.intents,
        held=bool(state.intents.held_by),
        was_running=status.phase in UP_PHASES,
        grace_expired=status.stopping_since is not None and state.now - status.stopping_since >= grace,
        start_backoff=status.next_start_at is not None and state.now < status.next_start_at,
    )


async def decide(state: VMState) -> Result | None:
    """Apply the run-policy decision to the state: intents, exit reason, phase, conditions."""
    held_by = state.intents.held_by
    decision = power.decide(power_inputs(state))
    state.decision = decision
    status, now, info = state.status, state.now, state.info
    state.intents = decision.intents
    if decision.last_exit != status.last_exit:
        status.last_exit = decision.last_exit
        status.last_exit_at = now
        if decision.last_exit is not None:
            by_agent = " (shut down by its guest agent)" if status.agent_shutdown_at is not None else ""
            state.ctx.event(
                state.vm,
                "Exited",
                f"domain stopped: {decision.last_exit.value}{by_agent}",
                warning=decision.last_exit in WARNING_EXITS,
            )
    running = info is not None and info.state is DomainState.RUNNING
    if running:
        status.start_failures = 0
        status.next_start_at = None
        status.conditions = remove_condition(status.conditions, VMCondition.START_FAILED)
    if decision.phase is not VMPhase.STOPPING:
        # the grace period belongs to a stop under way; once none is, it must not linger
        # (a stale one would requeue this VM in a tight loop)
        status.stopping_since = None
        status.agent_shutdown_at = None
    status.phase = decision.phase
    status.message = decision.message
    status.conditions = (
        set_condition(
            status.conditions, VMCondition.MAINTENANCE, True, "HeldByOperation", f"held by {held_by}", now=now
        )
        if held_by
        else remove_condition(status.conditions, VMCondition.MAINTENANCE)
    )
    status.conditions = set_condition(
        status.conditions, VMCondition.READY, running, decision.reason, decision.message, now=now
    )
    if decision.action is PowerAction.START and state.disks()[1]:
        status.phase = VMPhase.PENDING
        raise StopChain(Result(requeue_after=POLL_TRANSITION_S * 2))
    return None


async def act(state: VMState) -> Result | None:
    """At most one driver action, the decided one."""
    decision = state.decision
    assert decision is not None
    if decision.action is PowerAction.NONE:
        return _requeue(state, decision)
    if decision.action is PowerAction.START:
        return await _start(state)
    driver = (await state.host()).driver
    assert driver is not None
    ask_agent = False
    first_press = state.status.stopping_since is None
    if decision.action is PowerAction.STOP:
        # the grace period runs from the first press of the button, also when the press fails
        state.status.stopping_since = state.status.stopping_since or state.now
        ask_agent = await _agent_due(state, driver)
    await state.durable(DurablePoint.STOP)
    try:
        if ask_agent:
            await _agent_shutdown(state, driver)
        elif decision.action is PowerAction.STOP:
            await driver.shutdown(state.domain)  # again at each look: a booting guest may miss a press
            if first_press:  # one event per stop, not one per press
                state.ctx.event(
                    state.vm,
                    "Stopping",
                    f"graceful shutdown ({decision.message}), "
                    f"forced after {state.vm.spec.termination_grace_period_s}s",
                )
        else:
            await driver.destroy(state.domain)
            state.ctx.event(state.vm, "ForceStopped", f"powered off ({decision.message})")
    except NotFound:
        pass
    return Result(requeue_after=POLL_TRANSITION_S)


async def _agent_due(state: VMState, driver: HypervisorDriver) -> bool:
    """The guest has not heeded the power button for ``vm.stop.agent_after_s`` (at most half its
    grace period, so that the agent gets its turn before the power-off) and its agent is
    connected: ask the agent (once per stop; recorded as ``agent_shutdown_at`` before the call)."""
    status = state.status
    grace_s = state.vm.spec.termination_grace_period_s
    after = timedelta(seconds=min(state.ctx.settings.get_float("vm.stop.agent_after_s"), grace_s / 2))
    if status.agent_shutdown_at is not None or status.stopping_since is None:
        return False
    if state.now - status.stopping_since < after:
        return False
    try:
        connected = await driver.agent_connected(state.domain)
    except DriverError as exc:
        log.info("guest agent of %s: %s", state.name, exc)
        return False
    if connected:
        status.agent_shutdown_at = state.now
    return connected


async def _agent_shutdown(state: VMState, driver: HypervisorDriver) -> None:
    waited = (state.now - (state.status.stopping_since or state.now)).total_seconds()
    try:
        await driver.agent_shutdown(state.domain)
    except DriverError as exc:  # not NotFound: that one means the domain is gone (see act)
        if isinstance(exc, NotFound):
            raise
        state.ctx.event(
            state.vm, "AgentShutdownFailed", f"its guest agent could not shut it down: {exc}", warning=True
        )
        await driver.shutdown(state.domain)
        return
    state.ctx.event(
        state.vm,
        "AgentShutdown",
        f"the guest did not heed the ACPI power button for {waited:.0f}s: asked its guest agent to shut "
        f"it down, forced after {state.vm.spec.termination_grace_period_s}s",
    )


def _requeue(state: VMState, decision: PowerDecision) -> Result | None:
    status = state.status
    requeue = None
    if status.phase in TRANSITION_PHASES:
        requeue = POLL_TRANSITION_S
    if decision.reason == "StartBackoff" and status.next_start_at is not None:
        requeue = max(0.05, (status.next_start_at - state.now).total_seconds())
    if status.stopping_since is not None and status.phase is VMPhase.STOPPING:
        grace = timedelta(seconds=state.vm.spec.termination_grace_period_s)
        remaining = (status.stopping_since + grace - state.now).total_seconds()
        requeue = max(0.05, min(requeue or remaining, remaining))
    return Result(requeue_after=requeue) if requeue else None


def _usable(access: HostAccess) -> bool:
    """A host that may get the start: Enabled (no maintenance), connected."""
    host = access.host
    return (
        host is not None
        and access.driver is not None
        and accepts_vms(host.status.resource_state)
        and host.status.connection is HostConnection.UP
    )


def _place(state: VMState) -> tuple[str | None, str]:
    choice, view = start_choice(state.ctx.cache, state.vm, state.ctx.promised, state.ctx.real_use())
    if choice.host is not None:  # held until the write naming the host lands (the reconcile's end)
        state.ctx.promised.take(choice.host, view)
    return choice.host, explain(choice)


async def _start(state: VMState) -> Result | None:
    ctx, status, now = state.ctx, state.status, state.now
    access = await state.host()
    if not _usable(access):
        # (Re)place: a host that is gone, full, disabled or in maintenance never gets the start.
        if access.driver is not None:
            try:
                await access.driver.undefine(state.domain)
            except DriverError as exc:
                log.info("could not undefine %s on its old host: %s", state.domain, exc)
        target, why = _place(state)
        if target is None:
            status.phase = VMPhase.PENDING
            unplace(status, "Unschedulable", why, now=now)
            return Result(requeue_after=POLL_UNSCHEDULABLE_S)
        ctx.event(state.vm, "Scheduled", f"placed on {target} ({why})")
        access = await state.move_to(target)
        if access.driver is None:
            await state.durable(DurablePoint.PLACED)  # the start waits for the host to answer
            return Result(requeue_after=POLL_UNREACHABLE_S)
    driver = access.driver
    assert driver is not None
    base = ctx.settings.get_float("vm.start.backoff_base_s")
    cap = ctx.settings.get_float("vm.start.backoff_cap_s")
    attempts = status.start_failures + 1
    status.start_failures = attempts
    status.next_start_at = now + timedelta(seconds=start_retry_delay(attempts, base, cap))
    if attempts > 1:
        status.conditions = set_condition(
            status.conditions,
            VMCondition.START_FAILED,
            True,
            "Retrying",
            f"start attempt {attempts} after {attempts - 1} failed",
            now=now,
        )
    await state.durable(DurablePoint.START)
    try:
        spec = await state.define(driver)
        crashpoint(CRASH_POINTS[DurablePoint.START])
        await start_domain(state, driver, spec)  # from a restored snapshot's memory, or cold
    except DriverError as exc:
        delay = start_retry_delay(attempts, base, cap)
        status.next_start_at = now + timedelta(seconds=delay)
        status.phase = VMPhase.PENDING
        status.conditions = set_condition(
            status.conditions,
            VMCondition.START_FAILED,
            True,
            "StartFailed",
            f"start attempt {attempts} failed: {exc}; next attempt in {delay:.1f}s",
            now=now,
        )
        ctx.event(
            state.vm, "StartFailed", f"attempt {attempts}: {exc}; retrying in {delay:.1f}s", warning=True
        )
        if isinstance(exc, PermanentError) and not isinstance(exc, NotFound):
            log.warning("start of %s failed permanently on this host: %s", state.name, exc)
        return Result(requeue_after=max(delay, 0.05))
    if attempts > 1:
        ctx.event(
            state.vm,
            "StartRetry",
            f"attempt {attempts} after {attempts - 1} failed start(s); last exit: "
            f"{status.last_exit.value if status.last_exit else 'none'}",
            warning=True,
        )
    ctx.event(state.vm, "Started", f"start issued on {status.host} (attempt {attempts})")
    return Result(requeue_after=POLL_TRANSITION_S)


__all__ = ["act", "decide", "power_inputs"]
