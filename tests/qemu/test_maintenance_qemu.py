"""Host maintenance on real QEMU guests: each local-storage strategy, cancel, and a two-disk block migration.

What the guests print tells what really happened to them: the kernel's last line
(``POWERED_DOWN``) only when a guest powered off in order on the ACPI power button (a
graceful stop), a new ``GUEST-UP`` only on a new boot, and ``TICK n`` every 2 s while it runs. The daemons are asked directly where each
domain lives. DESIGN.md §5.2 and §5.5.
"""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from virtplane.domain.intents import PowerState, read_intents
from virtplane.domain.resources import Host, OperationType, RunPolicy, VMPhase, Volume
from virtplane.drivers.base import DomainState

from .conftest import console_shows
from .plane import LIMIT_S, POWERED_DOWN, QemuPlane, disk0, sector_holds, write_marker

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

LOCAL_A = "local-a"


async def guests_on_a(qplane: QemuPlane, *specs: tuple[str, int], grace_s: int = 20) -> None:
    """Hosts a and b; each (name, byte) is a Manual guest started on a, whose local disk starts
    with byte. Manual: once stopped, only the maintenance's intent can bring it back."""
    await qplane.add_host("a")
    await qplane.add_host("b", enabled=False)  # everything starts on a
    for name, byte in specs:
        await qplane.add_volume(f"{name}-root", pool=LOCAL_A)
        write_marker(qplane.local_file("a", f"{name}-root"), byte)
        qplane.add_vm(name, RunPolicy.MANUAL, f"{name}-root", grace_s=grace_s)
        await qplane.operate(name, OperationType.START)
    for name, byte in specs:
        await qplane.wait_settled(name, VMPhase.RUNNING)
        assert qplane.vm(name).status.host == "a"
        await console_shows(qplane.rig, qplane.domain(name), disk0(byte))
    qplane.store.mutate(Host, "b", lambda h: setattr(h.spec, "enabled", True))
    await eventually(lambda: qplane.host_state("b") == "Enabled", timeout=LIMIT_S)


async def stays_on_a_stopped_until_cancel(qplane: QemuPlane, *vms: str) -> None:
    """Held stopped by the maintenance, with the intent to run again, and off on both daemons."""
    for vm in vms:
        current = await qplane.wait_held_stopped(vm)
        intents = read_intents(current.metadata.annotations)
        assert intents.held_by == "maintenance/a" and intents.maintenance_power_state is PowerState.RUNNING
        assert current.status.host == "a" and await qplane.runs_on(vm) == []
        info = await qplane.info("a", vm)
        assert info is not None and info.state is DomainState.SHUTOFF, "stopped where it was, not moved"


async def cancel_starts_them_again(qplane: QemuPlane, *vms: str) -> None:
    boots = {vm: qplane.console(vm).count("GUEST-UP") for vm in vms}
    async with qplane.api() as api:
        response = await api.delete("/v1/hosts/a/maintenance")
        assert response.status_code == 200, response.text
    await eventually(lambda: qplane.host_state("a") == "Enabled", timeout=LIMIT_S)
    for vm in vms:
        current = await qplane.wait_settled(vm, VMPhase.RUNNING)
        assert current.status.host == "a" and await qplane.runs_on(vm) == ["a"]
        assert read_intents(current.metadata.annotations).maintenance_power_state is None
        await console_shows(qplane.rig, qplane.domain(vm), "GUEST-UP", count=boots[vm] + 1)


async def test_error_touches_nothing_then_force_stop_powers_off_and_cancel_starts_again(
    qplane: QemuPlane,
) -> None:
    await guests_on_a(qplane, ("lo", ord("L")))
    ticks = qplane.console("lo").count("TICK")
    async with qplane.api() as api:
        refused = await api.post("/v1/hosts/a/maintenance", json={"strategy": "Error"})
        assert refused.status_code == 200, refused.text
        await eventually(lambda: qplane.host_state("a") == "ErrorInMaintenance", timeout=LIMIT_S)
        shown = (await api.get("/v1/hosts/a/maintenance")).json()
        assert shown["blocking"] == ["lo"] and "local storage" in shown["message"]
        # the guest never noticed: same boot, still ticking, on a
        await console_shows(qplane.rig, qplane.domain("lo"), "TICK", count=ticks + 2)
        log = qplane.console("lo")
        assert log.count("GUEST-UP") == 1 and POWERED_DOWN not in log
        assert await qplane.runs_on("lo") == ["a"] and qplane.settled("lo", VMPhase.RUNNING)

        retried = await api.post("/v1/hosts/a/maintenance", json={"strategy": "ForceStop"})
        assert retried.status_code == 200, retried.text
        await eventually(lambda: qplane.host_state("a") == "Maintenance", timeout=LIMIT_S)
    await stays_on_a_stopped_until_cancel(qplane, "lo")
    assert POWERED_DOWN not in qplane.console("lo"), "powered off, not asked to shut down"
    assert any(reason == "ForceStopped" for reason, _ in qplane.events("lo"))
    await cancel_starts_them_again(qplane, "lo")


async def test_stop_waits_for_the_guest_then_forces_one_that_does_not_listen(qplane: QemuPlane) -> None:
    """calm obeys the power button within its grace period; deaf is paused, so it never hears
    it, and is powered off once its 4 s are up. Cancel boots both again."""
    await guests_on_a(qplane, ("calm", ord("C")), ("deaf", ord("D")), grace_s=4)
    await qplane.drivers["a"].pause(qplane.domain("deaf"))
    await eventually(lambda: qplane.vm("deaf").status.phase is VMPhase.PAUSED, timeout=LIMIT_S)
    async with qplane.api() as api:
        response = await api.post("/v1/hosts/a/maintenance", json={"strategy": "Stop"})
        assert response.status_code == 200, response.text
        await eventually(lambda: qplane.host_state("a") == "Maintenance", timeout=LIMIT_S)
    await stays_on_a_stopped_until_cancel(qplane, "calm", "deaf")
    calm = [reason for reason, _ in qplane.events("calm")]
    deaf = [reason for reason, _ in qplane.events("deaf")]
    assert POWERED_DOWN in qplane.console("calm") and "ForceStopped" not in calm
    assert POWERED_DOWN not in qplane.console("deaf") and "ForceStopped" in deaf
    await cancel_starts_them_again(qplane, "calm", "deaf")


async def test_migration_copies_both_local_disks_of_a_guest(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    await qplane.add_host("b", enabled=False)
    for volume, byte in (("two-root", ord("R")), ("two-data", ord("X"))):
        await qplane.add_volume(volume, pool=LOCAL_A)
        write_marker(qplane.local_file("a", volume), byte)
    qplane.add_vm("two", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "two-root", "two-data")
    await qplane.wait_settled("two", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("two"), disk0(ord("R")))
    assert "vda,vdb" in qplane.console("two"), "the guest sees both disks"
    qplane.store.mutate(Host, "b", lambda h: setattr(h.spec, "enabled", True))
    await eventually(lambda: qplane.host_state("b") == "Enabled", timeout=LIMIT_S)

    async with qplane.api() as api:
        response = await api.post("/v1/hosts/a/maintenance", json={"strategy": "Migration"})
        assert response.status_code == 200, response.text
        assert [(i["vm"], i["action"], i["target"]) for i in response.json()["plan"]["items"]] == [
            ("two", "MigrateWithStorage", "b")
        ]
        await eventually(lambda: qplane.host_state("a") == "Maintenance", timeout=LIMIT_S * 2)

    current = await qplane.wait_settled("two", VMPhase.RUNNING)
    assert current.status.host == "b" and await qplane.runs_on("two") == ["b"]
    assert await qplane.info("a", "two") is None
    log = qplane.console("two")
    assert log.count("GUEST-UP") == 1, "live: the guest was never restarted"
    await console_shows(qplane.rig, qplane.domain("two"), "TICK", count=log.count("TICK") + 2)
    for volume, byte in (("two-root", ord("R")), ("two-data", ord("X"))):
        assert qplane.store.get(Volume, volume).spec.pool == "local-b"
        assert sector_holds(qplane.local_file("b", volume), byte), f"{volume} arrived on b"
        assert not qplane.local_file("a", volume).exists(), f"{volume} left a"
