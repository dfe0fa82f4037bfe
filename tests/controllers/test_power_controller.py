"""The power-state controller on the simulated driver: each row of the run-policy table end to end."""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from tests.controllers.helpers import (
    add_host,
    add_vm,
    event_reasons,
    fault,
    operate,
    vm,
    wait_op,
    wait_settled,
)
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.resources import (
    ExitReason,
    Host,
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachine,
)
from virtplane.drivers.base import DomainSpec, domain_name
from virtplane.drivers.sim import SimDriver

ON = RunPolicy.ALWAYS_ON
OFF = RunPolicy.ALWAYS_OFF
MANUAL = RunPolicy.MANUAL
AOUSM = RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY


@pytest.fixture(autouse=True)
def fast_backoff(plane: ControlPlane) -> None:
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    plane.settings.set("vm.start.backoff_cap_s", 0.2)


@pytest.mark.parametrize(
    ("policy", "phase"), [(ON, "Running"), (OFF, "Stopped"), (MANUAL, "Stopped"), (AOUSM, "Running")]
)
async def test_created(plane: ControlPlane, policy: RunPolicy, phase: str) -> None:
    add_host(plane)
    add_vm(plane, "a", policy)
    await wait_settled(plane, "a", phase)
    await reconciled(plane, "a")
    assert vm(plane, "a").status.phase.value == phase, "the phase holds"


async def test_a_vm_whose_domain_is_gone_is_defined_once_and_started(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The domain of a VM on its host is gone (the host was reinstalled, its state lost): one
    reconcile defines it (observe) and starts it (act), with one define, not a second one of
    the same spec before the start (row 2 of the benchmarks: 10,000 of them at once)."""
    add_host(plane)
    add_vm(plane, "a", ON)
    await wait_settled(plane, "a", "Running")
    defined: list[str] = []
    define = SimDriver.ensure_defined

    async def counted(self: SimDriver, spec: DomainSpec) -> None:
        defined.append(spec.name)
        await define(self, spec)

    monkeypatch.setattr(SimDriver, "ensure_defined", counted)
    domain = domain_name(vm(plane, "a").metadata.uid)
    driver = await plane.ctx.hosts.get("sim://h1")
    await driver.destroy(domain)  # neither call suspends: no reconcile sees the domain off
    await driver.undefine(domain)
    await eventually(lambda: defined and vm(plane, "a").status.phase.value == "Running")
    await reconciled(plane, "a")
    assert defined == [domain]


@pytest.mark.parametrize(("policy", "after"), [(ON, "Running"), (MANUAL, "Stopped"), (AOUSM, "Stopped")])
async def test_guest_shutdown(plane: ControlPlane, policy: RunPolicy, after: str) -> None:
    add_host(plane)
    add_vm(plane, "a", policy)
    if policy is MANUAL:
        await wait_op(plane, operate(plane, "a", OperationType.START))
    await wait_settled(plane, "a", "Running")
    fault(plane, "h1", "guest-shutdown", "a")
    await eventually(lambda: "Exited" in event_reasons(plane, "a"))
    current = await wait_settled(plane, "a", after)
    await reconciled(plane, "a")
    assert vm(plane, "a").status.phase.value == after
    if after == "Stopped":
        assert current.status.last_exit is ExitReason.GUEST_SHUTDOWN


@pytest.mark.parametrize("policy", [ON, MANUAL, AOUSM])
async def test_guest_reset_keeps_running(plane: ControlPlane, policy: RunPolicy) -> None:
    add_host(plane)
    add_vm(plane, "a", policy)
    if policy is MANUAL:
        await wait_op(plane, operate(plane, "a", OperationType.START))
    await wait_settled(plane, "a", "Running")
    fault(plane, "h1", "guest-reset", "a")
    await reconciled(plane, "a")  # it saw the reset: the domain was booting again
    current = await wait_settled(plane, "a", "Running")
    assert current.status.last_exit is None
    assert "Exited" not in event_reasons(plane, "a")


@pytest.mark.parametrize(("policy", "after"), [(ON, "Running"), (MANUAL, "Stopped"), (AOUSM, "Running")])
async def test_crash(plane: ControlPlane, policy: RunPolicy, after: str) -> None:
    add_host(plane)
    add_vm(plane, "a", policy)
    if policy is MANUAL:
        await wait_op(plane, operate(plane, "a", OperationType.START))
    await wait_settled(plane, "a", "Running")
    fault(plane, "h1", "crash", "a")
    await eventually(lambda: "Exited" in event_reasons(plane, "a"))
    current = await wait_settled(plane, "a", after)
    if after == "Stopped":
        assert current.status.last_exit is ExitReason.CRASH, "the reason is recorded"
    else:
        assert "Started" in event_reasons(plane, "a")[-3:] or event_reasons(plane, "a").count("Started") >= 2


@pytest.mark.parametrize("policy", [ON, AOUSM])
async def test_failing_starts_are_retried_until_running(plane: ControlPlane, policy: RunPolicy) -> None:
    add_host(plane)
    add_vm(plane, "a", policy)
    await wait_settled(plane, "a", "Running")
    fault(plane, "h1", "fail-start", "a", count=3)
    fault(plane, "h1", "crash", "a")

    def failed_boots() -> int:
        events = plane.store.list_events(kind="VirtualMachine", name="a", limit=1000)
        return sum(e.reason == "StartRetry" and "start-failed" in e.message for e in events)

    await eventually(lambda: failed_boots() == 3, timeout=15)
    current = await wait_settled(plane, "a", "Running", timeout=15)
    assert failed_boots() == 3
    assert current.status.start_failures == 0, "reset once running"


async def test_manual_start_survives_failing_boots(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "a", MANUAL)
    await wait_settled(plane, "a", "Stopped")
    await eventually(lambda: vm(plane, "a").status.host is None)
    # the VM is placed on h1 at start; arm the faults for its domain up front
    plane.sim.add_host("h1", 16, 32768) if "h1" not in plane.sim.host_names else None
    from virtplane.drivers.base import domain_name

    plane.sim.inject("h1", "fail-start", domain_name(vm(plane, "a").metadata.uid), 2)
    op = await wait_op(plane, operate(plane, "a", OperationType.START), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED
    assert vm(plane, "a").status.phase.value == "Running"


async def test_stop_keeps_aousm_stopped_until_start(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "a", AOUSM, termination_grace_period_s=5)
    await wait_settled(plane, "a", "Running")
    stop = await wait_op(plane, operate(plane, "a", OperationType.STOP))
    assert stop.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Stopped")
    await reconciled(plane, "a")
    current = vm(plane, "a")
    assert current.status.phase.value == "Stopped", "stays stopped"
    assert current.status.last_exit is ExitReason.STOPPED_BY_USER
    start = await wait_op(plane, operate(plane, "a", OperationType.START))
    assert start.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Running")


async def _stop_a_guest_that_ignores_the_button(plane: ControlPlane, grace_s: int) -> list[str]:
    """A running Manual VM whose guest is paused (a paused guest ignores ACPI) is stopped; the
    stop completes, and the VM's event reasons are returned."""
    add_host(plane)
    add_vm(plane, "a", MANUAL, termination_grace_period_s=grace_s)
    await wait_op(plane, operate(plane, "a", OperationType.START))
    await wait_settled(plane, "a", "Running")
    domain = domain_name(vm(plane, "a").metadata.uid)
    await plane.sim.driver("sim://h1").pause(domain)
    op = await wait_op(plane, operate(plane, "a", OperationType.STOP))
    assert op.status.phase is OperationPhase.COMPLETED
    return event_reasons(plane, "a")


async def test_graceful_stop_is_forced_after_the_grace_period(plane: ControlPlane) -> None:
    assert "ForceStopped" in await _stop_a_guest_that_ignores_the_button(plane, grace_s=0)


async def test_a_long_graceful_stop_says_stopping_once(plane: ControlPlane) -> None:
    """The button is pressed again at each look while the guest ignores it; the VM's events
    say Stopping once for the stop, not once a press."""
    reasons = await _stop_a_guest_that_ignores_the_button(plane, grace_s=2)
    assert "ForceStopped" in reasons and reasons.count("Stopping") == 1, reasons


async def test_restart(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "a", ON)
    await wait_settled(plane, "a", "Running")
    op = await wait_op(plane, operate(plane, "a", OperationType.RESTART))
    assert op.status.phase is OperationPhase.COMPLETED
    reasons = event_reasons(plane, "a")
    assert reasons.count("Started") >= 2
    await wait_settled(plane, "a", "Running")


@pytest.mark.parametrize(
    ("policy", "kind", "reason"),
    [
        (ON, OperationType.START, "NotApplicable"),
        (ON, OperationType.STOP, "NotApplicable"),
        (OFF, OperationType.RESTART, "NotApplicable"),
    ],
)
async def test_refused_operations_fail_with_a_reason(
    plane: ControlPlane, policy: RunPolicy, kind: OperationType, reason: str
) -> None:
    add_host(plane)
    add_vm(plane, "a", policy)
    await wait_settled(plane, "a", "Running" if policy is ON else "Stopped")
    op = await wait_op(plane, operate(plane, "a", kind))
    assert op.status.phase is OperationPhase.FAILED
    assert op.status.reason == reason
    assert op.status.message


async def test_stop_supersedes_a_start_stuck_in_retries(plane: ControlPlane) -> None:
    add_host(plane)
    plane.settings.set("vm.start.backoff_base_s", 0.5)
    add_vm(plane, "a", MANUAL)
    await wait_settled(plane, "a", "Stopped")
    plane.sim.inject("h1", "fail-start", None, 1000)  # every boot on h1 fails
    start = operate(plane, "a", OperationType.START)
    await eventually(lambda: vm(plane, "a").status.start_failures >= 1)
    stop = operate(plane, "a", OperationType.STOP)
    stop_op = await wait_op(plane, stop)
    start_op = await wait_op(plane, start)
    assert start_op.status.phase is OperationPhase.SUPERSEDED
    assert stop_op.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Stopped")


async def test_second_operation_is_refused_while_one_is_active(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "a", MANUAL)
    await wait_settled(plane, "a", "Stopped")
    plane.sim.inject("h1", "fail-start", None, 1000)
    first = operate(plane, "a", OperationType.START)
    await eventually(lambda: vm(plane, "a").status.start_failures >= 1)
    second = await wait_op(plane, operate(plane, "a", OperationType.START))
    assert second.status.phase is OperationPhase.FAILED
    assert second.status.reason == "OperationInProgress" and first in second.status.message


async def test_policy_changes_take_effect(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "a", ON, termination_grace_period_s=1)
    await wait_settled(plane, "a", "Running")
    current = vm(plane, "a")
    current.spec.run_policy = OFF
    plane.store.update(current)
    await wait_settled(plane, "a", "Stopped")
    current = vm(plane, "a")
    current.spec.run_policy = MANUAL
    plane.store.update(current)
    await reconciled(plane, "a")
    assert vm(plane, "a").status.phase.value == "Stopped", "from AlwaysOff to Manual: stay off"
    current = vm(plane, "a")
    current.spec.run_policy = AOUSM
    plane.store.update(current)
    await wait_settled(plane, "a", "Running")


async def test_every_decision_is_an_event(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "a", ON)
    await wait_settled(plane, "a", "Running")
    fault(plane, "h1", "crash", "a")
    await eventually(lambda: event_reasons(plane, "a").count("Started") >= 2)
    reasons = event_reasons(plane, "a")
    for expected in ("Scheduled", "Started", "Exited"):
        assert expected in reasons


@pytest.mark.parametrize("force", [False, True])
async def test_a_settled_vm_is_left_alone_after_stop_and_restart(plane: ControlPlane, force: bool) -> None:
    """Regression: a grace-period timestamp left over from a stop requeued the VM in a tight loop."""
    add_host(plane)
    add_vm(plane, "a", MANUAL, termination_grace_period_s=1)
    await wait_op(plane, operate(plane, "a", OperationType.START))
    await wait_op(plane, operate(plane, "a", OperationType.RESTART, force=force))
    await wait_settled(plane, "a", "Running")
    outcome = await reconciled(plane, "a")
    assert vm(plane, "a").status.stopping_since is None
    assert outcome is None, f"an idle VM asks to be looked at again for nothing: {outcome}"


async def test_host_down_then_fenced_recovers_vms_elsewhere(plane: ControlPlane) -> None:
    """§3 'host down (after fencing, shared storage only)': start elsewhere / stay Stopped / start elsewhere."""
    add_host(plane, "h1")
    add_vm(plane, "on", ON, placement={"host_affinity": ["h1"]})
    add_vm(plane, "aousm", AOUSM, placement={"host_affinity": ["h1"]})
    add_vm(plane, "manual", MANUAL, placement={"host_affinity": ["h1"]})
    await wait_op(plane, operate(plane, "manual", OperationType.START))
    for name in ("on", "aousm", "manual"):
        await wait_settled(plane, name, "Running")
    add_host(plane, "h2")
    for name in ("on", "aousm", "manual"):  # free to move now
        plane.store.mutate(VirtualMachine, name, lambda v: setattr(v.spec.placement, "host_affinity", []))
    plane.sim.inject("h1", "host-down")
    for name in ("on", "aousm", "manual"):
        await eventually(  # the VM controller saw the host unreachable...
            lambda name=name: get_condition(vm(plane, name).status.conditions, VMCondition.HOST_REACHABLE)
        )
        await reconciled(plane, name)  # ...and looked again
        assert vm(plane, name).status.host == "h1", "an unreachable host is never guessed at"
    plane.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", True))
    for name in ("on", "aousm"):
        await eventually(lambda name=name: vm(plane, name).status.host == "h2")  # type: ignore[misc]
        await wait_settled(plane, name, "Running")
    manual = await wait_settled(plane, "manual", "Stopped")
    assert manual.status.last_exit is ExitReason.HOST_FAILURE
    plane.sim.inject("h1", "host-up")
    removed = await eventually(
        lambda: [
            e.message
            for e in plane.store.list_events(kind="Host", name="h1")
            if e.reason == "StaleDomainRemoved"
        ]
    )
    assert len(removed) == 3, "the domains of the VMs released from the fenced host are removed from it"
    assert vm(plane, "on").status.host == "h2"
    from virtplane.drivers.base import domain_name

    state = plane.sim.snapshot_state()
    for name in ("on", "aousm"):
        assert state.active_hosts(domain_name(vm(plane, name).metadata.uid)) == ["h2"], "never on two hosts"
