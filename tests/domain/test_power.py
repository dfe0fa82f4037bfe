"""The run-policy table of DESIGN.md §3, cell by cell, against the pure decision function."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtplane.domain.intents import Intents, PowerState, RestartStage, StopMode
from virtplane.domain.power import (
    AT_REST_REASONS,
    POLICY_WANTS_RUNNING,
    PowerAction,
    PowerInputs,
    decide,
    start_retry_delay,
)
from virtplane.domain.resources import ExitReason, RunPolicy, VMPhase

ON = RunPolicy.ALWAYS_ON
OFF = RunPolicy.ALWAYS_OFF
MANUAL = RunPolicy.MANUAL
AOUSM = RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY
START, STOP, FORCE, NONE = PowerAction.START, PowerAction.STOP, PowerAction.FORCE_STOP, PowerAction.NONE


def inputs(policy: RunPolicy, state: str | None = None, **kw: object) -> PowerInputs:
    return PowerInputs(
        run_policy=policy,
        domain_state=state,
        exit_reason=kw.pop("exit_reason", None),  # type: ignore[arg-type]
        last_exit=kw.pop("last_exit", None),  # type: ignore[arg-type]
        intents=kw.pop("intents", Intents()),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


# (row of the §3 table, policy, inputs, expected action, expected phase, expected recorded exit)
TABLE = [
    # VM created: start / stay off / stay off / start
    ("created", ON, dict(), START, VMPhase.STARTING, None),
    ("created", OFF, dict(), NONE, VMPhase.STOPPED, None),
    ("created", MANUAL, dict(), NONE, VMPhase.STOPPED, None),
    ("created", AOUSM, dict(), START, VMPhase.STARTING, None),
    # guest shuts down from inside: start again / — / stay Stopped / stay Stopped (counts as manual)
    (
        "guest shutdown",
        ON,
        dict(state="shutoff", exit_reason=ExitReason.GUEST_SHUTDOWN),
        START,
        VMPhase.STARTING,
        ExitReason.GUEST_SHUTDOWN,
    ),
    (
        "guest shutdown",
        OFF,
        dict(state="shutoff", exit_reason=ExitReason.GUEST_SHUTDOWN),
        NONE,
        VMPhase.STOPPED,
        ExitReason.GUEST_SHUTDOWN,
    ),
    (
        "guest shutdown",
        MANUAL,
        dict(state="shutoff", exit_reason=ExitReason.GUEST_SHUTDOWN),
        NONE,
        VMPhase.STOPPED,
        ExitReason.GUEST_SHUTDOWN,
    ),
    (
        "guest shutdown",
        AOUSM,
        dict(state="shutoff", exit_reason=ExitReason.GUEST_SHUTDOWN),
        NONE,
        VMPhase.STOPPED,
        ExitReason.GUEST_SHUTDOWN,
    ),
    # guest reboots (reset): keep running (the domain stays up through a reset)
    ("guest reset", ON, dict(state="running"), NONE, VMPhase.RUNNING, None),
    ("guest reset", MANUAL, dict(state="running"), NONE, VMPhase.RUNNING, None),
    ("guest reset", AOUSM, dict(state="running"), NONE, VMPhase.RUNNING, None),
    ("guest reset (booting again)", AOUSM, dict(state="starting"), NONE, VMPhase.STARTING, None),
    # crash: start again / — / stay Stopped, reason recorded / start again
    (
        "crash",
        ON,
        dict(state="shutoff", exit_reason=ExitReason.CRASH),
        START,
        VMPhase.STARTING,
        ExitReason.CRASH,
    ),
    (
        "crash",
        OFF,
        dict(state="shutoff", exit_reason=ExitReason.CRASH),
        NONE,
        VMPhase.STOPPED,
        ExitReason.CRASH,
    ),
    (
        "crash",
        MANUAL,
        dict(state="shutoff", exit_reason=ExitReason.CRASH),
        NONE,
        VMPhase.STOPPED,
        ExitReason.CRASH,
    ),
    (
        "crash",
        AOUSM,
        dict(state="shutoff", exit_reason=ExitReason.CRASH),
        START,
        VMPhase.STARTING,
        ExitReason.CRASH,
    ),
    # domain vanished
    ("vanished", ON, dict(was_running=True), START, VMPhase.STARTING, ExitReason.VANISHED),
    ("vanished", MANUAL, dict(was_running=True), NONE, VMPhase.STOPPED, ExitReason.VANISHED),
    ("vanished", AOUSM, dict(was_running=True), START, VMPhase.STARTING, ExitReason.VANISHED),
    # host down (after fencing): start elsewhere / — / stay Stopped / start elsewhere
    (
        "host down",
        ON,
        dict(last_exit=ExitReason.HOST_FAILURE),
        START,
        VMPhase.STARTING,
        ExitReason.HOST_FAILURE,
    ),
    (
        "host down",
        MANUAL,
        dict(last_exit=ExitReason.HOST_FAILURE),
        NONE,
        VMPhase.STOPPED,
        ExitReason.HOST_FAILURE,
    ),
    (
        "host down",
        AOUSM,
        dict(last_exit=ExitReason.HOST_FAILURE),
        START,
        VMPhase.STARTING,
        ExitReason.HOST_FAILURE,
    ),
    # Start operation (AlwaysOn/AlwaysOff refusals are the admission table's): start / start
    (
        "Start op",
        MANUAL,
        dict(state="shutoff", last_exit=ExitReason.STOPPED_BY_USER, intents=Intents(start=True)),
        START,
        VMPhase.STARTING,
        ExitReason.STOPPED_BY_USER,
    ),
    (
        "Start op",
        AOUSM,
        dict(state="shutoff", last_exit=ExitReason.STOPPED_BY_USER, intents=Intents(start=True)),
        START,
        VMPhase.STARTING,
        ExitReason.STOPPED_BY_USER,
    ),
    (
        "Start op, AlwaysOff drops it",
        OFF,
        dict(state="shutoff", intents=Intents(start=True)),
        NONE,
        VMPhase.STOPPED,
        ExitReason.STOPPED_BY_SYSTEM,
    ),
    # Stop operation: stop / stop; stays stopped until Start
    (
        "Stop op",
        MANUAL,
        dict(state="running", intents=Intents(stop=StopMode.GRACEFUL)),
        STOP,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Stop op",
        AOUSM,
        dict(state="running", intents=Intents(stop=StopMode.GRACEFUL)),
        STOP,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Stop op forced",
        AOUSM,
        dict(state="running", intents=Intents(stop=StopMode.FORCE)),
        FORCE,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Stop op past grace",
        MANUAL,
        dict(state="shutting-down", grace_expired=True, intents=Intents(stop=StopMode.GRACEFUL)),
        FORCE,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Stop op within grace",
        MANUAL,
        dict(state="shutting-down", intents=Intents(stop=StopMode.GRACEFUL)),
        NONE,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Stop confirmed",
        AOUSM,
        dict(
            state="shutoff", exit_reason=ExitReason.STOPPED_BY_SYSTEM, intents=Intents(stop=StopMode.GRACEFUL)
        ),
        NONE,
        VMPhase.STOPPED,
        ExitReason.STOPPED_BY_USER,
    ),
    (
        "stopped by user stays stopped",
        AOUSM,
        dict(state="shutoff", exit_reason=ExitReason.STOPPED_BY_SYSTEM, last_exit=ExitReason.STOPPED_BY_USER),
        NONE,
        VMPhase.STOPPED,
        ExitReason.STOPPED_BY_USER,
    ),
    (
        "Stop op ignored by AlwaysOn",
        ON,
        dict(state="running", intents=Intents(stop=StopMode.GRACEFUL)),
        NONE,
        VMPhase.RUNNING,
        None,
    ),
    # Restart operation: restart / refused / restart / restart
    (
        "Restart op, stopping",
        ON,
        dict(state="running", intents=Intents(restart=RestartStage.STOPPING_GRACEFUL)),
        STOP,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Restart op, forced",
        MANUAL,
        dict(state="running", intents=Intents(restart=RestartStage.STOPPING_FORCE)),
        FORCE,
        VMPhase.STOPPING,
        None,
    ),
    (
        "Restart op, stopped -> start",
        MANUAL,
        dict(
            state="shutoff",
            exit_reason=ExitReason.STOPPED_BY_SYSTEM,
            intents=Intents(restart=RestartStage.STOPPING_GRACEFUL),
        ),
        START,
        VMPhase.STARTING,
        None,
    ),
    (
        "Restart op, stopped -> start",
        AOUSM,
        dict(
            state="shutoff",
            exit_reason=ExitReason.STOPPED_BY_SYSTEM,
            intents=Intents(restart=RestartStage.STARTING),
        ),
        START,
        VMPhase.STARTING,
        None,
    ),
    (
        "Restart op, running again",
        MANUAL,
        dict(state="running", intents=Intents(restart=RestartStage.STARTING)),
        NONE,
        VMPhase.RUNNING,
        None,
    ),
    (
        "Restart op, AlwaysOff drops it",
        OFF,
        dict(state="shutoff", intents=Intents(restart=RestartStage.STARTING)),
        NONE,
        VMPhase.STOPPED,
        ExitReason.STOPPED_BY_SYSTEM,
    ),
    # policy changed to AlwaysOff: stop / — / stop / stop
    ("policy -> AlwaysOff", OFF, dict(state="running"), STOP, VMPhase.STOPPING, ExitReason.STOPPED_BY_SYSTEM),
    (
        "policy -> AlwaysOff past grace",
        OFF,
        dict(state="shutting-down", grace_expired=True),
        FORCE,
        VMPhase.STOPPING,
        ExitReason.STOPPED_BY_SYSTEM,
    ),
    # policy changed from AlwaysOff: start / — / stay off / start
    (
        "policy from AlwaysOff",
        ON,
        dict(
            state="shutoff", exit_reason=ExitReason.STOPPED_BY_SYSTEM, last_exit=ExitReason.STOPPED_BY_SYSTEM
        ),
        START,
        VMPhase.STARTING,
        ExitReason.STOPPED_BY_SYSTEM,
    ),
    (
        "policy from AlwaysOff",
        MANUAL,
        dict(
            state="shutoff", exit_reason=ExitReason.STOPPED_BY_SYSTEM, last_exit=ExitReason.STOPPED_BY_SYSTEM
        ),
        NONE,
        VMPhase.STOPPED,
        ExitReason.STOPPED_BY_SYSTEM,
    ),
    (
        "policy from AlwaysOff",
        AOUSM,
        dict(
            state="shutoff", exit_reason=ExitReason.STOPPED_BY_SYSTEM, last_exit=ExitReason.STOPPED_BY_SYSTEM
        ),
        START,
        VMPhase.STARTING,
        ExitReason.STOPPED_BY_SYSTEM,
    ),
    # a start that failed is retried after its backoff, never abandoned
    (
        "boot failed, AlwaysOn",
        ON,
        dict(state="shutoff", exit_reason=ExitReason.START_FAILED),
        START,
        VMPhase.STARTING,
        ExitReason.START_FAILED,
    ),
    (
        "boot failed, in backoff",
        ON,
        dict(state="shutoff", exit_reason=ExitReason.START_FAILED, start_backoff=True),
        NONE,
        VMPhase.PENDING,
        ExitReason.START_FAILED,
    ),
    (
        "boot failed, Manual with start intent",
        MANUAL,
        dict(state="shutoff", exit_reason=ExitReason.START_FAILED, intents=Intents(start=True)),
        START,
        VMPhase.STARTING,
        ExitReason.START_FAILED,
    ),
    (
        "start confirmed clears the intent",
        MANUAL,
        dict(state="running", intents=Intents(start=True)),
        NONE,
        VMPhase.RUNNING,
        None,
    ),
]


@pytest.mark.parametrize(
    ("row", "policy", "given", "action", "phase", "recorded"),
    TABLE,
    ids=[f"{r[0]}-{r[1].value}" for r in TABLE],
)
def test_run_policy_table(
    row: str,
    policy: RunPolicy,
    given: dict[str, object],
    action: PowerAction,
    phase: VMPhase,
    recorded: ExitReason | None,
) -> None:
    decision = decide(inputs(policy, **given))
    assert (decision.action, decision.phase, decision.last_exit) == (action, phase, recorded), decision


def test_the_table_covers_every_policy_for_every_basic_row() -> None:
    rows: dict[str, set[RunPolicy]] = {}
    for row, policy, *_ in TABLE:
        rows.setdefault(row, set()).add(policy)
    for row in ("created", "guest shutdown", "crash"):
        assert rows[row] == set(RunPolicy), row
    assert set(POLICY_WANTS_RUNNING) == set(RunPolicy)


def test_intents_are_cleared_only_once_confirmed() -> None:
    pending = decide(inputs(MANUAL, "starting", intents=Intents(start=True)))
    assert pending.intents.start, "a start still booting keeps its intent"
    confirmed = decide(inputs(MANUAL, "running", intents=Intents(start=True)))
    assert not confirmed.intents.start
    stopping = decide(inputs(AOUSM, "running", intents=Intents(stop=StopMode.GRACEFUL)))
    assert stopping.intents.stop is StopMode.GRACEFUL
    stopped = decide(
        inputs(
            AOUSM,
            "shutoff",
            exit_reason=ExitReason.STOPPED_BY_SYSTEM,
            intents=Intents(stop=StopMode.GRACEFUL),
        )
    )
    assert stopped.intents.stop is None


@pytest.mark.parametrize("policy", list(RunPolicy))
@pytest.mark.parametrize("recorded", [PowerState.RUNNING, PowerState.STOPPED])
def test_restore_power_state_is_consumed_where_the_domain_exists_again(
    policy: RunPolicy, recorded: PowerState
) -> None:
    """§4 step 5: Running → a durable start request; Stopped → stays stopped; AlwaysOff/AlwaysOn win."""
    decision = decide(
        inputs(policy, "shutoff", exit_reason=None, intents=Intents(restore_power_state=recorded))
    )
    assert decision.intents.restore_power_state is None
    should_run = policy is ON or (recorded is PowerState.RUNNING and policy is not OFF)
    assert (decision.action is START) == should_run, decision
    if recorded is PowerState.RUNNING and policy is not OFF:
        assert decision.intents.start, "the intent became a durable start request in the same write"
    if not should_run:
        again = decide(inputs(policy, "shutoff", last_exit=decision.last_exit, intents=decision.intents))
        assert again.action is NONE, "a VM restored as Stopped stays stopped on the next reconcile too"


@pytest.mark.parametrize("recorded", [ExitReason.STOPPED_BY_USER, ExitReason.GUEST_SHUTDOWN])
@pytest.mark.parametrize(
    "older", [ExitReason.HOST_FAILURE, ExitReason.CRASH, ExitReason.START_FAILED, ExitReason.VANISHED]
)
def test_an_owner_stop_stands_against_the_older_reason_of_a_domain_that_has_not_run_since(
    recorded: ExitReason, older: ExitReason
) -> None:
    """A stopped AlwaysOnUnlessStoppedManually VM adopted onto a copy that died with a fenced host
    (the locate step after a restore, or the census after a release) must not start: the copy's
    host-failure is older than the owner's stop (crash harness, seed 1076353083)."""
    decision = decide(inputs(AOUSM, "shutoff", exit_reason=older, last_exit=recorded))
    assert (decision.action, decision.phase, decision.last_exit) == (NONE, VMPhase.STOPPED, recorded)
    # once a start is asked, what its domain reports is news again: a failed boot says so
    for asked in (Intents(start=True), Intents(restart=RestartStage.STARTING)):
        retry = decide(inputs(AOUSM, "shutoff", exit_reason=older, last_exit=recorded, intents=asked))
        assert (retry.action, retry.last_exit) == (START, older)


RESUME = "snap-1"


@pytest.mark.parametrize(
    ("policy", "state", "intents", "held", "action", "resumes"),
    [
        # held by the restore: the recorded Running state keeps it
        (MANUAL, None, Intents(restore_power_state=PowerState.RUNNING, held_by="r"), True, NONE, True),
        # released: Running becomes the start that resumes the memory
        (MANUAL, "shutoff", Intents(restore_power_state=PowerState.RUNNING), False, START, True),
        (AOUSM, "shutoff", Intents(restore_power_state=PowerState.RUNNING), False, START, True),
        (ON, "shutoff", Intents(restore_power_state=PowerState.RUNNING), False, START, True),
        (MANUAL, "shutoff", Intents(start=True), False, START, True),  # a start waiting for its retry
        (MANUAL, "running", Intents(start=True), False, NONE, False),  # it runs: used up
        # no start comes of it: the image is never used later
        (OFF, "shutoff", Intents(restore_power_state=PowerState.RUNNING), False, NONE, False),
        (MANUAL, "shutoff", Intents(restore_power_state=PowerState.STOPPED), False, NONE, False),
        (ON, "shutoff", Intents(restore_power_state=PowerState.STOPPED), False, START, False),  # policy, cold
        (MANUAL, "shutoff", Intents(), False, NONE, False),
        (MANUAL, "shutoff", Intents(start=True, stop=StopMode.GRACEFUL), False, NONE, False),  # stopped first
    ],
)
def test_a_memory_image_is_only_for_the_start_a_restored_running_state_becomes(
    policy: RunPolicy, state: str | None, intents: Intents, held: bool, action: PowerAction, resumes: bool
) -> None:
    decision = decide(inputs(policy, state, intents=intents.with_(resume_from_memory=RESUME), held=held))
    assert decision.action is action
    assert decision.intents.resume_from_memory == (RESUME if resumes else None)


def test_a_held_vm_is_only_stopped_and_reports_stopped_not_pending() -> None:
    held = Intents(
        held_by="restore-1",
        restore_power_state=PowerState.RUNNING,
        stop=StopMode.GRACEFUL,
        stop_by_system=True,
    )
    stopping = decide(inputs(ON, "running", intents=held, held=True))
    assert stopping.action is STOP
    stopped = decide(inputs(ON, "shutoff", exit_reason=ExitReason.STOPPED_BY_SYSTEM, intents=held, held=True))
    assert stopped.action is NONE and stopped.phase is VMPhase.STOPPED
    assert stopped.last_exit is ExitReason.STOPPED_BY_SYSTEM
    assert stopped.intents.restore_power_state is PowerState.RUNNING, "kept while held"
    gone = decide(inputs(ON, None, intents=stopped.intents, held=True))
    assert gone.action is NONE and gone.phase is VMPhase.STOPPED


def test_maintenance_power_state_restarts_a_vm_stopped_by_the_system() -> None:
    intents = Intents(maintenance_power_state=PowerState.RUNNING)
    for policy in (MANUAL, AOUSM, ON):
        decision = decide(inputs(policy, "shutoff", last_exit=ExitReason.STOPPED_BY_SYSTEM, intents=intents))
        assert decision.action is START and decision.intents.maintenance_power_state is None
    off = decide(inputs(OFF, "shutoff", last_exit=ExitReason.STOPPED_BY_SYSTEM, intents=intents))
    assert off.action is NONE


@pytest.mark.parametrize("state", ["migrating", "incoming"])
@pytest.mark.parametrize("policy", [MANUAL, ON, OFF, AOUSM])
def test_a_vm_in_flight_is_never_torn_down_nor_started(state: str, policy: RunPolicy) -> None:
    """Leaving (migrating) or arriving (incoming), a live migration owns the domain."""
    for intents in (Intents(stop=StopMode.FORCE), Intents(start=True), Intents()):
        decision = decide(inputs(policy, state, intents=intents))
        assert decision.action is NONE and decision.phase is VMPhase.MIGRATING, (policy, intents)


@pytest.mark.parametrize(
    ("failures", "delay"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0), (10, 300.0), (1000, 300.0)]
)
def test_start_retry_backoff_doubles_and_is_capped(failures: int, delay: float) -> None:
    assert start_retry_delay(failures, 1.0, 300.0) == delay


ON_ITS_WAY_REASONS = {"Starting", "StartBackoff", "Stopping", "ForceStopping", "WaitingForMigration"}
"""The decision reasons of a VM not yet in the power state it should be in (metrics and alerts)."""


def maybe(values: Any) -> st.SearchStrategy[Any]:
    return st.none() | st.sampled_from(list(values))


@given(
    policy=st.sampled_from(list(RunPolicy)),
    state=maybe(
        ["running", "starting", "paused", "shutting-down", "shutoff", "crashed", "migrating", "incoming"]
    ),
    exit_reason=maybe(ExitReason),
    last_exit=maybe(ExitReason),
    intents=st.builds(
        Intents,
        start=st.booleans(),
        stop=maybe(StopMode),
        stop_by_system=st.booleans(),
        restart=maybe(RestartStage),
        restore_power_state=maybe(PowerState),
        maintenance_power_state=maybe(PowerState),
        held_by=maybe(["restore-1"]),
    ),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)
def test_every_decision_is_at_rest_or_on_its_way_and_one_that_acts_is_never_at_rest(
    policy: RunPolicy,
    state: str | None,
    exit_reason: ExitReason | None,
    last_exit: ExitReason | None,
    intents: Intents,
    flags: tuple[bool, bool, bool, bool],
) -> None:
    """``AT_REST_REASONS`` decides ``virtplane_vm_in_desired_power_state``: a new reason must be
    classified, and a decision that starts or stops the VM is on its way by definition."""
    held, was_running, grace_expired, start_backoff = flags
    decision = decide(
        inputs(
            policy,
            state,
            exit_reason=exit_reason,
            last_exit=last_exit,
            intents=intents,
            held=held,
            was_running=was_running,
            grace_expired=grace_expired,
            start_backoff=start_backoff,
        )
    )
    assert decision.reason in AT_REST_REASONS | ON_ITS_WAY_REASONS, decision
    if decision.action is not NONE:
        assert decision.reason not in AT_REST_REASONS, decision
