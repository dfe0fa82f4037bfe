"""The power-state decision: the only place that knows the run-policy rules (DESIGN.md §3).

``decide`` is a pure function from what is stored and observed to one action, the
intents to store *before* acting, the exit reason to record, and the phase to
report. The VM controller applies it one step at a time. The table
``POLICY_WANTS_RUNNING`` is the run-policy table of §3 as data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import assert_never

from virtplane.domain.intents import Intents, PowerState, RestartStage, StopMode, memory_resume_stands
from virtplane.domain.phases import ACTIVE_STATES, IN_FLIGHT_STATES, UP_STATES, DomainState
from virtplane.domain.resources import ExitReason, RunPolicy, VMPhase


class PowerAction(StrEnum):
    NONE = "none"
    START = "start"
    STOP = "stop"  # graceful, within termination_grace_period_s
    FORCE_STOP = "force-stop"


# Exit reasons after which AlwaysOnUnlessStoppedManually counts the VM as stopped by its owner.
MANUAL_STOP_REASONS = frozenset({ExitReason.GUEST_SHUTDOWN, ExitReason.STOPPED_BY_USER})


class Want(StrEnum):
    RUN = "run"
    STOP = "stop"
    KEEP = "keep"  # leave the VM as it is (Manual after a crash or a guest shutdown)


def policy_wants(policy: RunPolicy, last_exit: ExitReason | None) -> Want:
    """A run policy's column of the table of §3 (its rows: how the VM last stopped, None if it
    never ran). Guest resets keep the domain running, so they never reach it."""
    match policy:
        case RunPolicy.ALWAYS_ON:
            return Want.RUN
        case RunPolicy.ALWAYS_OFF:
            return Want.STOP
        case RunPolicy.MANUAL:
            return Want.KEEP
        case RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY:
            return Want.KEEP if last_exit in MANUAL_STOP_REASONS else Want.RUN
        case _:
            assert_never(policy)


POLICY_WANTS_RUNNING: dict[RunPolicy, dict[ExitReason | None, Want]] = {
    policy: {reason: policy_wants(policy, reason) for reason in [*ExitReason, None]} for policy in RunPolicy
}
"""The run-policy table (§3) as data, one lookup a decision."""


@dataclass(frozen=True)
class PowerInputs:
    run_policy: RunPolicy
    domain_state: str | None  # a DomainState; None: no domain exists for the VM
    exit_reason: ExitReason | None  # the driver's reason for the domain's last stop
    last_exit: ExitReason | None  # what the VM's status recorded
    intents: Intents
    held: bool = False  # an operation (restore, host maintenance) holds the VM
    was_running: bool = False  # the VM's status said it was running (detects a vanished domain)
    grace_expired: bool = False  # a graceful stop has run longer than termination_grace_period_s
    start_backoff: bool = False  # a failed start is waiting for its next attempt


@dataclass(frozen=True)
class PowerDecision:
    action: PowerAction
    intents: Intents
    last_exit: ExitReason | None
    phase: VMPhase
    reason: str
    message: str = ""


def _record_exit(inputs: PowerInputs) -> ExitReason | None:
    """The exit reason to record for a domain that is not running."""
    if inputs.domain_state == DomainState.RUNNING:
        return None  # it runs: whatever stopped it before is over
    if inputs.domain_state in ACTIVE_STATES:
        return inputs.last_exit
    if inputs.domain_state is None:
        if inputs.was_running and inputs.last_exit is None:
            return ExitReason.VANISHED
        return inputs.last_exit
    reason = inputs.exit_reason
    if reason is None:
        return inputs.last_exit
    # The driver cannot tell who asked for a stop it carried out; the intent can.
    if reason is ExitReason.STOPPED_BY_SYSTEM and inputs.intents.stop is not None:
        return ExitReason.STOPPED_BY_SYSTEM if inputs.intents.stop_by_system else ExitReason.STOPPED_BY_USER
    if reason is ExitReason.STOPPED_BY_SYSTEM and inputs.intents.restart is not None:
        return inputs.last_exit
    if reason is ExitReason.STOPPED_BY_SYSTEM and inputs.last_exit is not None:
        return inputs.last_exit  # keep the more specific reason recorded when the stop was confirmed
    if (
        inputs.last_exit in MANUAL_STOP_REASONS
        and not inputs.intents.start
        and inputs.intents.restart is None
    ):
        # The owner's stop stands until the VM runs again (running clears it): a domain that has
        # not run since, with no start asked, can only report an older stop, e.g. a copy that
        # died with a fenced host and was adopted later by the locate step.
        return inputs.last_exit
    return reason


def _active_phase(state: str) -> VMPhase:
    return {
        DomainState.RUNNING: VMPhase.RUNNING,
        DomainState.STARTING: VMPhase.STARTING,
        DomainState.PAUSED: VMPhase.PAUSED,
        DomainState.SHUTTING_DOWN: VMPhase.STOPPING,
        DomainState.MIGRATING: VMPhase.MIGRATING,
        DomainState.INCOMING: VMPhase.MIGRATING,
    }[DomainState(state)]


def _stop(
    inputs: PowerInputs, intents: Intents, last_exit: ExitReason | None, force: bool, why: str
) -> PowerDecision:
    state = inputs.domain_state
    assert state in ACTIVE_STATES
    if state in IN_FLIGHT_STATES:
        # never tear down a VM in flight; the migration ends first (it may be aborted)
        return PowerDecision(
            PowerAction.NONE, intents, last_exit, VMPhase.MIGRATING, "WaitingForMigration", why
        )
    if force or inputs.grace_expired:
        return PowerDecision(
            PowerAction.FORCE_STOP, intents, last_exit, VMPhase.STOPPING, "ForceStopping", why
        )
    if state == DomainState.SHUTTING_DOWN:
        return PowerDecision(PowerAction.NONE, intents, last_exit, VMPhase.STOPPING, "Stopping", why)
    return PowerDecision(PowerAction.STOP, intents, last_exit, VMPhase.STOPPING, "Stopping", why)


def _start(inputs: PowerInputs, intents: Intents, last_exit: ExitReason | None, why: str) -> PowerDecision:
    state = inputs.domain_state
    if state in ACTIVE_STATES:
        assert state is not None
        return PowerDecision(PowerAction.NONE, intents, last_exit, _active_phase(state), "Starting", why)
    if inputs.start_backoff:
        return PowerDecision(PowerAction.NONE, intents, last_exit, VMPhase.PENDING, "StartBackoff", why)
    return PowerDecision(PowerAction.START, intents, last_exit, VMPhase.STARTING, "Starting", why)


def _idle(inputs: PowerInputs, intents: Intents, last_exit: ExitReason | None, why: str) -> PowerDecision:
    state = inputs.domain_state
    if state in ACTIVE_STATES:
        assert state is not None
        return PowerDecision(PowerAction.NONE, intents, last_exit, _active_phase(state), "InSync", why)
    return PowerDecision(PowerAction.NONE, intents, last_exit, VMPhase.STOPPED, "Stopped", why)


def _steady(policy: RunPolicy) -> str:
    """The message of a VM at rest; a request just carried out says the same, so that the
    next look (with the request gone) finds nothing to write."""
    return f"run policy {policy.value}"


def decide(inputs: PowerInputs) -> PowerDecision:
    decision = _decide(inputs)
    if decision.intents.resume_from_memory is not None and not memory_resume_stands(decision.intents):
        return replace(decision, intents=decision.intents.with_(resume_from_memory=None))
    return decision


def _decide(inputs: PowerInputs) -> PowerDecision:
    intents = inputs.intents
    policy = inputs.run_policy
    state = inputs.domain_state
    active = state in ACTIVE_STATES
    running = state in UP_STATES
    last_exit = _record_exit(inputs)

    # 1. An explicit stop (user Stop, or a stop asked by restore/maintenance) is carried out
    #    even while held; it is cleared only once the domain is seen off.
    if intents.stop is not None and not (policy is RunPolicy.ALWAYS_ON and not intents.stop_by_system):
        if active:
            return _stop(inputs, intents, last_exit, intents.stop is StopMode.FORCE, "stop requested")
        done = intents.with_(stop=None, stop_by_system=False, start=False)
        if state is None or last_exit in (None, ExitReason.STOPPED_BY_SYSTEM, ExitReason.STOPPED_BY_USER):
            last_exit = ExitReason.STOPPED_BY_SYSTEM if intents.stop_by_system else ExitReason.STOPPED_BY_USER
        return _idle(inputs, done, last_exit, _steady(policy))
    if intents.stop is not None:
        intents = intents.with_(stop=None, stop_by_system=False)  # AlwaysOn refuses a user stop

    # 2. Held by an operation: nothing but its stop happens; the VM reports Stopped, not Pending.
    if inputs.held:
        decision = _idle(inputs, intents, last_exit, f"held by {intents.held_by}")
        return PowerDecision(
            decision.action, intents, last_exit, decision.phase, "Maintenance", decision.message
        )

    # 3. Intents recorded across a destructive window become ordinary requests here, where
    #    the domain exists again. Both are rewritten in the same store write as the request.
    for recorded_state, field in (
        (intents.restore_power_state, "restore_power_state"),
        (intents.maintenance_power_state, "maintenance_power_state"),
    ):
        if recorded_state is None:
            continue
        intents = intents.with_(**{field: None})
        if recorded_state is PowerState.RUNNING and policy is not RunPolicy.ALWAYS_OFF:
            intents = intents.with_(start=True)
        elif recorded_state is PowerState.STOPPED and policy is not RunPolicy.ALWAYS_ON and not active:
            # kept stopped on purpose: AlwaysOnUnlessStoppedManually must not start it
            last_exit = ExitReason.STOPPED_BY_USER

    # 4. AlwaysOff wins over any request to run.
    if policy is RunPolicy.ALWAYS_OFF:
        intents = intents.with_(start=False, restart=None)
        if active:
            return _stop(
                inputs, intents, last_exit or ExitReason.STOPPED_BY_SYSTEM, False, "run policy AlwaysOff"
            )
        if state is not None and last_exit is None:
            last_exit = ExitReason.STOPPED_BY_SYSTEM
        return _idle(inputs, intents, last_exit, "run policy AlwaysOff")

    # 5. Restart: stop (graceful or forced), then start; the stage survives a crash.
    if intents.restart in (RestartStage.STOPPING_GRACEFUL, RestartStage.STOPPING_FORCE):
        if active:
            return _stop(
                inputs, intents, last_exit, intents.restart is RestartStage.STOPPING_FORCE, "restart"
            )
        intents = intents.with_(restart=RestartStage.STARTING)
    if intents.restart is RestartStage.STARTING:
        if state == DomainState.RUNNING:
            return _idle(inputs, intents.with_(restart=None, start=False), last_exit, _steady(policy))
        return _start(inputs, intents, last_exit, "restart")

    # 6. An explicit start (Start operation, restored or maintenance power state).
    if intents.start:
        if state == DomainState.RUNNING:
            return _idle(inputs, intents.with_(start=False), last_exit, _steady(policy))
        return _start(inputs, intents, last_exit, "start requested")

    # 7. The run policy decides.
    want = POLICY_WANTS_RUNNING[policy][last_exit]
    if want is Want.RUN:
        if running:
            return _idle(inputs, intents, last_exit, _steady(policy))
        return _start(inputs, intents, last_exit, f"run policy {policy.value}")
    return _idle(inputs, intents, last_exit, _steady(policy))


def start_retry_delay(failed_attempts: int, base_s: float, cap_s: float) -> float:
    """Delay before the next start after ``failed_attempts`` consecutive failures (capped doubling)."""
    if failed_attempts <= 0:
        return 0.0
    return float(min(cap_s, base_s * (2 ** min(failed_attempts - 1, 40))))


AT_REST_REASONS = frozenset({"InSync", "Stopped", "Maintenance"})
"""The decision reasons of a VM in the power state it should be in: as its policy and requests
ask, or held by an operation. Every other reason (Starting, StartBackoff, Stopping,
ForceStopping, WaitingForMigration) is on the way there; the VM's Ready condition carries it."""
