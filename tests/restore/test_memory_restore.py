"""Restoring a snapshot taken with memory (issue 11, part 3).

A VM that was Running before the restore resumes the snapshot's memory: the guest goes
on from the moment of the snapshot. One that was Stopped stays stopped and later boots
cold. When the image cannot be used, the VM boots cold and MemoryRestored=False says
why. On the simulator, whose memory marker is what the guest had in memory (a cold
boot writes ``<domain>:boot-N``), and on libvirt's test driver.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import eventually, libvirt_or_skip
from tests.controllers.helpers import operate, vm, wait_op, wait_settled
from tests.restore.test_restore import bring_to, make_vm, restore, snapshot
from virtplane.bootstrap import ControlPlane
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.intents import read_intents
from virtplane.domain.resources import (
    Condition,
    OperationPhase,
    OperationType,
    RestoreMode,
    RunPolicy,
    VirtualMachine,
    Volume,
)
from virtplane.drivers.base import domain_name

MANUAL, AOUSM = RunPolicy.MANUAL, RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY


@pytest.fixture(autouse=True)
def fast_backoff(plane: ControlPlane) -> None:
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    plane.settings.set("vm.start.backoff_cap_s", 0.2)


def dname(plane: ControlPlane) -> str:
    return domain_name(vm(plane, "a").metadata.uid)


def memory_condition(plane: ControlPlane) -> Condition | None:
    return get_condition(vm(plane, "a").status.conditions, VMCondition.MEMORY_RESTORED)


async def restored(plane: ControlPlane, snap: str, expected: str) -> None:
    op = await wait_op(plane, restore(plane, "a", snap), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    await wait_settled(plane, "a", expected, timeout=15)
    assert read_intents(vm(plane, "a").metadata.annotations).resume_from_memory is None, "used up"


@pytest.mark.parametrize("policy", [MANUAL, AOUSM])
async def test_a_vm_running_before_the_restore_resumes_the_snapshots_memory(
    plane: ControlPlane, policy: RunPolicy
) -> None:
    await make_vm(plane, policy)
    await bring_to(plane, "a", "Running")
    plane.sim.write_memory(dname(plane), "counter=41")
    snap = await snapshot(plane, "a", with_memory=True)
    assert snap.status.memory_handle
    plane.sim.write_memory(dname(plane), "counter=99")  # the guest went on counting

    await restored(plane, snap.metadata.name, "Running")
    assert plane.sim.read_memory(dname(plane)) == "counter=41", "it went on from the snapshot"
    condition = memory_condition(plane)
    assert condition is not None and (condition.status.value, condition.reason) == (
        "True",
        "ResumedFromMemory",
    )
    events = [e.reason for e in plane.store.list_events(kind="VirtualMachine", name="a", limit=1000)]
    assert "ResumedFromMemory" in events and "ColdBoot" not in events


async def test_a_later_plain_start_clears_memory_restored(plane: ControlPlane) -> None:
    """MemoryRestored speaks of the start after a restore; once the VM has stopped and booted
    again, cold, it would claim a resume that no longer holds (issue 39: no stale conditions)."""
    await make_vm(plane, MANUAL)
    await bring_to(plane, "a", "Running")
    snap = await snapshot(plane, "a", with_memory=True)
    await restored(plane, snap.metadata.name, "Running")
    resumed = memory_condition(plane)
    assert resumed is not None and resumed.reason == "ResumedFromMemory"

    await bring_to(plane, "a", "Stopped")
    await bring_to(plane, "a", "Running")
    assert plane.sim.read_memory(dname(plane)).startswith(f"{dname(plane)}:boot-"), "a plain boot"
    assert memory_condition(plane) is None


async def test_a_vm_stopped_before_the_restore_stays_stopped_and_later_boots_cold(
    plane: ControlPlane,
) -> None:
    await make_vm(plane, MANUAL)
    await bring_to(plane, "a", "Running")
    plane.sim.write_memory(dname(plane), "counter=41")
    snap = await snapshot(plane, "a", with_memory=True)
    await bring_to(plane, "a", "Stopped")

    await restored(plane, snap.metadata.name, "Stopped")
    await bring_to(plane, "a", "Running")  # a Start operation, later: a plain boot
    assert plane.sim.read_memory(dname(plane)) == f"{dname(plane)}:boot-1"
    assert memory_condition(plane) is None


async def test_an_image_that_cannot_be_used_boots_cold_and_says_why(plane: ControlPlane) -> None:
    await make_vm(plane, AOUSM)
    await bring_to(plane, "a", "Running")
    plane.sim.write_memory(dname(plane), "counter=41")
    snap = await snapshot(plane, "a", with_memory=True)
    assert snap.status.memory_handle is not None
    plane.sim.forget_memory(snap.status.memory_handle)  # the image is lost on the hypervisor

    await restored(plane, snap.metadata.name, "Running")
    assert plane.sim.read_memory(dname(plane)) == f"{dname(plane)}:boot-1", "a cold boot"
    condition = memory_condition(plane)
    assert condition is not None and (condition.status.value, condition.reason) == ("False", "ColdBoot")
    assert condition.message.startswith("booted cold: the hypervisor could not use the saved memory: ")
    assert "does not exist" in condition.message

    plain = await snapshot(plane, "a")  # no memory: the next restore boots cold, saying nothing
    await restored(plane, plain.metadata.name, "Running")
    assert memory_condition(plane) is None, "an earlier restore's outcome does not linger"


async def test_a_best_effort_restore_that_skipped_a_disk_boots_cold(plane: ControlPlane) -> None:
    await make_vm(plane, AOUSM)
    await bring_to(plane, "a", "Running")
    snap = await snapshot(plane, "a", with_memory=True)
    op = await wait_op(plane, operate(plane, "a", OperationType.STOP))
    assert op.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Stopped")
    # the disk goes away: the memory image would miss it
    plane.store.mutate(VirtualMachine, "a", lambda v: setattr(v.spec, "disks", []))
    await eventually(lambda: plane.store.get(Volume, "a-root").status.attached_vm is None)
    plane.store.mutate(
        Volume, "a-root", lambda v: setattr(v.metadata, "deletion_requested_at", plane.ctx.now())
    )
    await eventually(lambda: plane.store.find(Volume, "a-root") is None)
    await bring_to(plane, "a", "Running")

    done = await wait_op(plane, restore(plane, "a", snap.metadata.name, RestoreMode.BEST_EFFORT), timeout=15)
    assert done.status.phase is OperationPhase.COMPLETED, done.status.message
    await wait_settled(plane, "a", "Running", timeout=15)
    condition = memory_condition(plane)
    assert condition is not None and condition.reason == "ColdBoot"
    assert (
        condition.message == f"booted cold: disk(s) a-root of snapshot {snap.metadata.name} were not restored"
    )


async def test_on_libvirts_test_driver_too_with_no_host_path_in_the_reason(
    plane: ControlPlane, tmp_path: Path
) -> None:
    libvirt_or_skip()
    from tests.drivers.conftest import write_node_xml

    await make_vm(plane, AOUSM, uri=write_node_xml(tmp_path / "h1.xml"))
    await wait_settled(plane, "a", "Running")
    first = await snapshot(plane, "a", with_memory=True)
    await restored(plane, first.metadata.name, "Running")
    condition = memory_condition(plane)
    assert condition is not None and condition.reason == "ResumedFromMemory"

    second = await snapshot(plane, "a", with_memory=True)
    handle = second.status.memory_handle
    assert handle is not None and os.path.isabs(handle)
    os.remove(handle)  # the image file is gone from the host
    await restored(plane, second.metadata.name, "Running")
    condition = memory_condition(plane)
    assert condition is not None and condition.reason == "ColdBoot"
    assert handle not in condition.message and os.path.dirname(handle) not in condition.message
    assert "<path>" in condition.message, condition.message
