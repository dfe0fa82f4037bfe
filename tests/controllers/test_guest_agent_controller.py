"""The guest agent end to end on the simulator: a stop whose guest ignores ACPI goes through the
agent, a snapshot freezes the guest's filesystems around the copy (and says so), and the
guest's own addresses show in the VM's status."""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from tests.controllers.helpers import event_reasons, operate, vm, wait_op, wait_settled
from tests.reconciles import reconciled
from tests.restore.test_restore import bring_to, make_vm, snapshot
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    ExitReason,
    GuestAgentState,
    OperationPhase,
    OperationType,
    RunPolicy,
    SnapshotConsistency,
    SnapshotPhase,
    VirtualMachineSnapshot,
)
from virtplane.drivers.base import GuestInterface, domain_name
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.sim import SimDriver, SimGuest

ETH0 = GuestInterface(name="eth0", mac="52:54:00:00:00:01", addresses=("10.1.0.10/24", "fe80::1/64"))


@pytest.fixture(autouse=True)
def fast_backoff(plane: ControlPlane) -> None:
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    plane.settings.set("vm.start.backoff_cap_s", 0.2)


async def running_vm(plane: ControlPlane, guest: SimGuest, *, grace: int = 30) -> str:
    made = await make_vm(plane, RunPolicy.MANUAL, grace=grace)
    plane.sim.set_guest(domain_name(made.metadata.uid), guest)
    await bring_to(plane, "a", "Running")
    return domain_name(made.metadata.uid)


def messages(plane: ControlPlane, reason: str) -> list[str]:
    events = plane.store.list_events(kind="VirtualMachine", name="a", limit=1000)
    return [e.message for e in events if e.reason == reason]


async def test_a_guest_that_ignores_acpi_is_shut_down_by_its_agent(plane: ControlPlane) -> None:
    plane.settings.set("vm.stop.agent_after_s", 0.3)
    await running_vm(plane, SimGuest(agent=True, ignores_acpi=True))
    stop = await wait_op(plane, operate(plane, "a", OperationType.STOP), timeout=15)
    assert stop.status.phase is OperationPhase.COMPLETED
    stopped = await wait_settled(plane, "a", "Stopped")
    assert stopped.status.last_exit is ExitReason.STOPPED_BY_USER
    reasons = event_reasons(plane, "a")
    assert "AgentShutdown" in reasons and "ForceStopped" not in reasons
    assert any("shut down by its guest agent" in m for m in messages(plane, "Exited"))
    assert stopped.status.agent_shutdown_at is None  # it belonged to the stop, which is over


async def test_the_agent_gets_its_turn_within_a_grace_period_shorter_than_the_setting(
    plane: ControlPlane,
) -> None:
    plane.settings.set("vm.stop.agent_after_s", 600.0)  # longer than the grace period: half of it
    await running_vm(plane, SimGuest(agent=True, ignores_acpi=True), grace=2)
    stop = await wait_op(plane, operate(plane, "a", OperationType.STOP), timeout=15)
    assert stop.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Stopped")
    reasons = event_reasons(plane, "a")
    assert "AgentShutdown" in reasons and "ForceStopped" not in reasons


async def test_a_guest_that_ignores_acpi_without_an_agent_is_forced_off_after_the_grace_period(
    plane: ControlPlane,
) -> None:
    plane.settings.set("vm.stop.agent_after_s", 0.1)
    await running_vm(plane, SimGuest(agent=False, ignores_acpi=True), grace=1)
    stop = await wait_op(plane, operate(plane, "a", OperationType.STOP), timeout=15)
    assert stop.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Stopped")
    reasons = event_reasons(plane, "a")
    assert "ForceStopped" in reasons and "AgentShutdown" not in reasons


async def test_a_snapshot_freezes_the_guest_with_an_agent_and_says_so(plane: ControlPlane) -> None:
    dname = await running_vm(plane, SimGuest(agent=True, filesystems=2))
    snap = await snapshot(plane, "a")
    assert snap.status.consistency is SnapshotConsistency.FILESYSTEM_FROZEN
    assert "froze 2 filesystem(s)" in snap.status.consistency_reason
    assert dname not in plane.sim.guests.frozen  # thawed after the copy


async def test_a_snapshot_without_an_agent_is_crash_consistent_and_of_a_stopped_vm_powered_off(
    plane: ControlPlane,
) -> None:
    await running_vm(plane, SimGuest(agent=False))
    snap = await snapshot(plane, "a")
    assert snap.status.consistency is SnapshotConsistency.CRASH_CONSISTENT
    assert "no guest agent" in snap.status.consistency_reason
    await bring_to(plane, "a", "Stopped")
    snap = await snapshot(plane, "a")
    assert snap.status.consistency is SnapshotConsistency.POWERED_OFF


async def test_a_failed_copy_still_thaws_the_guest(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    dname = await running_vm(plane, SimGuest(agent=True))

    async def broken(*args: object) -> str:
        assert dname in plane.sim.guests.frozen  # the copy runs while the guest is frozen
        raise PermanentError("the disk copy failed")

    monkeypatch.setattr(SimDriver, "snapshot_volume", broken)
    plane.store.create(
        VirtualMachineSnapshot.model_validate({"metadata": {"name": "s"}, "spec": {"vm": "a"}})
    )
    await eventually(
        lambda: plane.store.get(VirtualMachineSnapshot, "s").status.phase is SnapshotPhase.FAILED
    )
    assert dname not in plane.sim.guests.frozen


async def test_the_guests_own_addresses_show_beside_the_ipam_ones_without_a_write_per_look(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    await running_vm(plane, SimGuest(agent=True, interfaces=(ETH0,)))
    current = await eventually(lambda: (v := vm(plane, "a")).status.guest_addresses and v)
    assert current.status.guest_agent is GuestAgentState.CONNECTED
    assert [(i.name, i.addresses) for i in current.status.guest_addresses] == [
        ("eth0", ["10.1.0.10/24", "fe80::1/64"])
    ]
    version = current.metadata.resource_version
    reads: list[str] = []
    read = SimDriver.guest_interfaces

    async def counted(self: SimDriver, name: str) -> tuple[GuestInterface, ...]:
        reads.append(name)
        return await read(self, name)

    monkeypatch.setattr(SimDriver, "guest_interfaces", counted)
    for _ in range(3):
        plane.enqueue("VirtualMachine", "a")
        await reconciled(plane, "a")
    assert vm(plane, "a").metadata.resource_version == version  # nothing new: nothing written
    assert reads == []  # and not read again before vm.guest_agent.refresh_s
    await bring_to(plane, "a", "Stopped")
    stopped = vm(plane, "a")
    assert stopped.status.guest_agent is None and stopped.status.guest_addresses == []


async def test_a_guest_without_an_agent_shows_not_connected(plane: ControlPlane) -> None:
    await running_vm(plane, SimGuest(agent=False))
    current = await eventually(lambda: (v := vm(plane, "a")).status.guest_agent and v)
    assert current.status.guest_agent is GuestAgentState.NOT_CONNECTED
    assert current.status.guest_addresses == []
