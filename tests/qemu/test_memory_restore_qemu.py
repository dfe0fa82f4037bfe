"""A restore of a snapshot taken with memory, on a real QEMU guest under the control plane.

The guest prints ``TICK n`` every 2 s from a counter in its memory. A VM that was
Running before the restore resumes the snapshot's memory: its ticks go on from the
snapshot's value and it does not boot again. Without the memory image (removed from
the host) it boots cold: ``GUEST-UP`` again, ticks from 1, and MemoryRestored=False.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.qemu.plane import QemuPlane
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.resources import (
    OperationType,
    RunPolicy,
    VMPhase,
)

from .conftest import console_shows

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

LIMIT_S = 120.0
_TICK = re.compile(r"^TICK (\d+)\s*$", re.MULTILINE)


def ticks(text: str) -> list[int]:
    return [int(n) for n in _TICK.findall(text)]


async def _running_guest(qplane: QemuPlane, name: str) -> str:
    await qplane.add_host("a")
    await qplane.add_volume(f"{name}-root")
    qplane.add_vm(name, RunPolicy.MANUAL, f"{name}-root")
    await qplane.wait_settled(name, VMPhase.STOPPED)  # Manual: created stays off
    await qplane.operate(name, OperationType.START)
    await qplane.wait_settled(name, VMPhase.RUNNING)
    dname = qplane.domain(name)
    await console_shows(qplane.rig, dname, "TICK 3", limit_s=LIMIT_S)
    return dname


async def test_a_restored_running_guest_goes_on_counting_from_the_snapshot(qplane: QemuPlane) -> None:
    dname = await _running_guest(qplane, "mem")
    before = ticks(qplane.console("mem"))[-1]
    snap = await qplane.snapshot("mem", with_memory=True)
    at_snapshot = ticks(qplane.console("mem"))[-1]  # the guest was frozen while it was taken
    # it goes on counting well past the snapshot before the restore
    await console_shows(qplane.rig, dname, f"TICK {at_snapshot + 4}", limit_s=LIMIT_S)
    mark = len(qplane.console("mem"))

    await qplane.restore("mem", snap.metadata.name)
    await qplane.wait_settled("mem", VMPhase.RUNNING)
    after = await console_shows(qplane.rig, dname, "TICK", count=qplane.console("mem").count("TICK") + 2)
    resumed = after[mark:]
    assert "GUEST-UP" not in resumed, "it did not boot again"
    counted = ticks(resumed)
    assert counted and before < counted[0] <= at_snapshot + 1, (before, at_snapshot, counted)
    assert counted == list(range(counted[0], counted[0] + len(counted))), "and it goes on from there"
    condition = get_condition(qplane.vm("mem").status.conditions, VMCondition.MEMORY_RESTORED)
    assert condition is not None and (condition.status.value, condition.reason) == (
        "True",
        "ResumedFromMemory",
    )
    assert await qplane.runs_on("mem") == ["a"]


async def test_without_its_memory_image_the_guest_boots_cold_and_says_why(qplane: QemuPlane) -> None:
    dname = await _running_guest(qplane, "cold")
    snap = await qplane.snapshot("cold", with_memory=True)
    handle = snap.status.memory_handle
    assert handle is not None and handle.startswith("/var/lib/libvirt/")
    image = qplane.rig.base / "hosts" / "a" / "lib" / Path(handle).relative_to("/var/lib/libvirt")
    assert image.exists()
    image.unlink()  # lost on the host
    before = qplane.console("cold")
    boots = before.count("GUEST-UP")

    await qplane.restore("cold", snap.metadata.name)
    await qplane.wait_settled("cold", VMPhase.RUNNING)
    booted = await console_shows(qplane.rig, dname, "GUEST-UP", count=boots + 1, limit_s=LIMIT_S)
    # count from the cold boot's GUEST-UP: the old guest may print one more tick while it powers off
    cold_boot = booted.rindex("GUEST-UP")
    log = await console_shows(
        qplane.rig, dname, "TICK", count=booted[:cold_boot].count("TICK") + 1, limit_s=LIMIT_S
    )
    assert ticks(log[cold_boot:])[0] == 1, "a cold boot counts from 1"
    condition = get_condition(qplane.vm("cold").status.conditions, VMCondition.MEMORY_RESTORED)
    assert condition is not None and condition.reason == "ColdBoot"
    assert condition.message.startswith("booted cold: the hypervisor could not use the saved memory")
    assert "/var/lib" not in condition.message and str(qplane.rig.base) not in condition.message
