"""The guest agent on real QEMU: the test guest runs Debian's qemu-ga on its
org.qemu.guest_agent.0 port (scripts/qemu/build-initrd.sh; ``vp.no_agent=1`` leaves it out,
``vp.ignore_acpi=1`` leaves the power button unheard). A stop of a guest that ignores ACPI goes
through the agent, a snapshot freezes the guest's /data around the copy (and one of a guest
without an agent says it is only crash-consistent), and the guest's own addresses show in the
VM's status."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import eventually
from virtplane.domain.networks import CloudInit
from virtplane.domain.resources import (
    GuestAgentState,
    OperationType,
    RunPolicy,
    SnapshotConsistency,
    VMPhase,
)

from .conftest import CACHE, Rig, console_shows, guest_spec
from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


@pytest.fixture(autouse=True)
def guest_with_agent() -> None:
    """The test guest has qemu-ga only when setup.sh could fetch Debian's qemu-guest-agent."""
    if not (CACHE / "qga" / "usr" / "sbin" / "qemu-ga").exists():
        problem = f"no qemu-ga under {CACHE}/qga (run scripts/qemu/setup.sh)"
        if os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1":
            pytest.fail(problem)
        pytest.skip(problem)


async def agent_connected(qplane: QemuPlane, vm: str) -> None:
    await eventually(lambda: qplane.vm(vm).status.guest_agent is GuestAgentState.CONNECTED, timeout=LIMIT_S)


async def test_a_guest_that_ignores_acpi_is_stopped_by_its_agent(qplane: QemuPlane) -> None:
    qplane.plane.settings.set("vm.stop.agent_after_s", 3.0)
    await qplane.add_host("a")
    await qplane.add_volume("deaf-root")
    qplane.add_vm(
        "deaf",
        RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
        "deaf-root",
        grace_s=40,
        cmdline="vp.ignore_acpi=1",
    )
    await qplane.wait_settled("deaf", VMPhase.RUNNING)
    dname = qplane.domain("deaf")
    await console_shows(qplane.rig, dname, "AGENT-UP")
    await agent_connected(qplane, "deaf")

    await qplane.operate("deaf", OperationType.STOP)
    await qplane.wait_settled("deaf", VMPhase.STOPPED)
    log = await console_shows(qplane.rig, dname, "GUEST-AGENT-SHUTDOWN")
    assert "ACPI ignored" in log and "GUEST-POWEROFF" not in log  # not the power button's script
    reasons = [reason for reason, _ in qplane.events("deaf")]
    assert "AgentShutdown" in reasons and "ForceStopped" not in reasons
    assert any(r == "Exited" and "guest agent" in m for r, m in qplane.events("deaf"))


async def test_a_snapshot_freezes_the_guest_through_its_agent_and_the_guest_reports_its_addresses(
    qplane: QemuPlane,
) -> None:
    qplane.plane.settings.set("vm.guest_agent.refresh_s", 1.0)
    await qplane.add_host("a")
    await qplane.add_volume("agent-root")
    # an address of the guest's own (it has no NIC here): the agent reports it, IPAM knows nothing of it
    user_data = "#!/bin/sh\nip addr add 10.99.0.7/32 dev lo\necho ADDRESS-ADDED\n"
    qplane.add_vm("agent", RunPolicy.ALWAYS_ON, "agent-root", cloud_init=CloudInit(user_data=user_data))
    await qplane.wait_settled("agent", VMPhase.RUNNING)
    dname = qplane.domain("agent")
    await console_shows(qplane.rig, dname, "ADDRESS-ADDED")
    await agent_connected(qplane, "agent")

    snap = await qplane.snapshot("agent")
    assert snap.status.consistency is SnapshotConsistency.FILESYSTEM_FROZEN, snap.status.consistency_reason
    assert "froze 1 filesystem(s)" in snap.status.consistency_reason  # /data, ext2 on a loop file
    log = await console_shows(qplane.rig, dname, "GUEST-THAW")
    assert log.index("GUEST-FREEZE") < log.index("GUEST-THAW")

    def reported() -> list[str]:
        return [a for i in qplane.vm("agent").status.guest_addresses for a in i.addresses]

    await eventually(lambda: "10.99.0.7/32" in reported(), timeout=LIMIT_S)


async def test_a_snapshot_of_a_guest_without_an_agent_is_crash_consistent(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    await qplane.add_volume("plain-root")
    qplane.add_vm("plain", RunPolicy.ALWAYS_ON, "plain-root", cmdline="vp.no_agent=1")
    await qplane.wait_settled("plain", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("plain"), "AGENT: none")
    await eventually(
        lambda: qplane.vm("plain").status.guest_agent is GuestAgentState.NOT_CONNECTED, timeout=LIMIT_S
    )
    snap = await qplane.snapshot("plain")
    assert snap.status.consistency is SnapshotConsistency.CRASH_CONSISTENT
    assert "no guest agent" in snap.status.consistency_reason


async def test_a_memory_image_saved_before_the_agent_channel_still_resumes(
    rig: Rig, drivers: dict[str, Any]
) -> None:
    """A memory snapshot taken by a release whose domains had no agent channel: the restore's
    definition (which has one now) leaves it out, or QEMU could not load the state."""
    a = drivers["a"]
    spec = guest_spec(rig, "old-memory")
    current = a.flavor
    a.flavor = replace(current, xml=replace(current.xml, guest_agent=False))  # as before the channel
    try:
        await a.ensure_defined(spec)
        await a.start(spec.name)
        await console_shows(rig, spec.name, "TICK 1")
        handle = await a.save_memory(spec.name, "before-channel")
        await a.destroy(spec.name)
    finally:
        a.flavor = current
    await a.restore_memory(spec, handle)  # with today's definition
    log = await console_shows(rig, spec.name, "TICK 3")
    assert log.count("GUEST-UP") == 1  # resumed from memory, not booted again
    await a.delete_volume_snapshot(handle)
