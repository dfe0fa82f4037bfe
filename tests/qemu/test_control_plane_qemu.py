"""The whole control plane on real QEMU guests under two real libvirt daemons.

A ``ControlPlane`` runs in the test's event loop with its default driver factory:
the Host resources carry the rig's ``qemu+unix://`` URIs, the pools are a shared
directory pool (the rig's shared directory, seen by both daemons) and a local pool
per host at /var/lib/libvirt/images (each daemon's own). Guests are the busybox
test guest (192 MiB); their serial consoles show ``DISK0: <first 16 bytes of vda>``
at boot and ``TICK n`` every 2 s, which is what the tests read besides the
drivers' own view of the domains.

Scenarios: a restore brings back the disk content and the power state the VM had
before it (DESIGN.md §4); a host drained under the Migration strategy moves a
shared-storage and a local-storage guest live to the other daemon (§5).
"""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import eventually
from virtplane.controllers.storage import volume_file
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.resources import Host, OperationType, RunPolicy, VMPhase, Volume

from .conftest import LOCAL_IMAGES, console_shows
from .plane import LIMIT_S, QemuPlane, disk0, sector_holds, write_marker

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


# --------------------------------------------------------------------------- restore


async def test_restore_brings_back_disk_content_and_the_running_state(qplane: QemuPlane) -> None:
    """Write a marker, snapshot, change it, restore, read it back; Running before -> Running after."""
    await qplane.add_host("a")
    await qplane.add_host("b")
    volume = await qplane.add_volume("rd-root")
    write_marker(volume.status.path, ord("A"))  # no VM uses the volume yet
    qplane.add_vm("rd", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "rd-root")
    await qplane.wait_settled("rd", VMPhase.RUNNING)
    dname = qplane.domain("rd")
    await console_shows(qplane.rig, dname, disk0(ord("A")))
    await console_shows(qplane.rig, dname, "TICK 1")  # DISKTICK 1 is on the disk too

    snap = await qplane.snapshot("rd")  # live: a backup job while the guest runs
    assert snap.status.power_state == "Running" and len(snap.status.disk_snapshots) == 1
    assert sector_holds(snap.status.disk_snapshots[0].handle, ord("A"))

    # Change the marker: stop the VM, overwrite the sector, start it again and see it boot with B.
    await qplane.operate("rd", OperationType.STOP)
    await qplane.wait_settled("rd", VMPhase.STOPPED)
    write_marker(volume.status.path, ord("B"))
    await qplane.operate("rd", OperationType.START)
    await qplane.wait_settled("rd", VMPhase.RUNNING)
    await console_shows(qplane.rig, dname, disk0(ord("B")))
    boots = qplane.console("rd").count("GUEST-UP")
    assert boots == 2

    op = await qplane.restore("rd", snap.metadata.name)
    assert op.status.reason == "Restored"
    current = await qplane.wait_settled("rd", VMPhase.RUNNING)
    assert get_condition(current.status.conditions, VMCondition.MAINTENANCE) is None
    # It booted again (the restore stopped it and removed its domain) from the restored disk.
    log = await console_shows(qplane.rig, dname, disk0(ord("A")), count=2)
    assert log.count("GUEST-UP") == boots + 1
    assert log.rindex(disk0(ord("A"))) > log.rindex(disk0(ord("B")))
    host = current.status.host
    assert host is not None and await qplane.runs_on("rd") == [host]

    # And the bytes themselves, read from the image after a stop.
    await qplane.operate("rd", OperationType.STOP)
    await qplane.wait_settled("rd", VMPhase.STOPPED)
    assert sector_holds(volume.status.path, ord("A"))
    assert not sector_holds(volume.status.path, ord("B"))


async def test_restore_keeps_each_vms_power_state_before_the_restore(qplane: QemuPlane) -> None:
    """A Manual VM stopped before the restore stays stopped (its snapshot was taken running);
    an AlwaysOnUnlessStoppedManually VM running before comes back running (snapshot taken stopped)."""
    await qplane.add_host("a")
    await qplane.add_host("b")
    await qplane.add_volume("man-root")
    await qplane.add_volume("auto-root")
    qplane.add_vm("man", RunPolicy.MANUAL, "man-root")
    qplane.add_vm("auto", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "auto-root")

    await qplane.wait_settled("man", VMPhase.STOPPED)  # Manual: created stays off
    await qplane.operate("man", OperationType.START)
    await qplane.wait_settled("auto", VMPhase.RUNNING)
    await qplane.wait_settled("man", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("man"), "GUEST-UP")
    await console_shows(qplane.rig, qplane.domain("auto"), "GUEST-UP")

    await qplane.operate("auto", OperationType.STOP)
    await qplane.wait_settled("auto", VMPhase.STOPPED)
    man_snap, auto_snap = await qplane.snapshot("man"), await qplane.snapshot("auto")
    assert (man_snap.status.power_state, auto_snap.status.power_state) == ("Running", "Stopped")
    await qplane.operate("man", OperationType.STOP)
    await qplane.operate("auto", OperationType.START)
    await qplane.wait_settled("man", VMPhase.STOPPED)
    await qplane.wait_settled("auto", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("auto"), "GUEST-UP", count=2)
    man_boots = qplane.console("man").count("GUEST-UP")

    await qplane.restore("man", man_snap.metadata.name)
    await qplane.restore("auto", auto_snap.metadata.name)

    man = await qplane.wait_settled("man", VMPhase.STOPPED)
    auto = await qplane.wait_settled("auto", VMPhase.RUNNING)
    assert man.spec.run_policy is RunPolicy.MANUAL
    assert auto.spec.run_policy is RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY
    # auto booted a third time after the restore; the daemons agree with the store
    await console_shows(qplane.rig, qplane.domain("auto"), "GUEST-UP", count=3)
    assert await qplane.runs_on("auto") == [auto.status.host]
    assert await qplane.runs_on("man") == []
    assert qplane.console("man").count("GUEST-UP") == man_boots, "the stopped VM never booted"
    for vm in (man, auto):
        assert get_condition(vm.status.conditions, VMCondition.MAINTENANCE) is None


# --------------------------------------------------------------------------- host maintenance


async def test_drain_with_migration_strategy_moves_shared_and_local_guests_live(qplane: QemuPlane) -> None:
    """A host drained with one shared-storage and one local-storage guest under the Migration
    strategy: both still running on the other daemon afterwards; cancel brings the host back."""
    await qplane.add_host("a")
    await qplane.add_host("b", enabled=False)  # both guests start on a
    shared = await qplane.add_volume("sh-root")
    local = await qplane.add_volume("lo-root", pool="local-a")
    write_marker(shared.status.path, ord("S"))
    local_on_a = qplane.local_file("a", "lo-root")
    assert local.status.path == f"{LOCAL_IMAGES}/{volume_file(local)}" and local_on_a.exists()
    write_marker(local_on_a, ord("L"))
    qplane.add_vm("sh", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "sh-root")
    qplane.add_vm("lo", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "lo-root")
    for vm, byte in (("sh", ord("S")), ("lo", ord("L"))):
        await qplane.wait_settled(vm, VMPhase.RUNNING)
        assert qplane.vm(vm).status.host == "a"
        await console_shows(qplane.rig, qplane.domain(vm), disk0(byte))
        assert await qplane.runs_on(vm) == ["a"]
    qplane.store.mutate(Host, "b", lambda h: setattr(h.spec, "enabled", True))
    await eventually(lambda: qplane.host_state("b") == "Enabled", timeout=LIMIT_S)

    token = qplane.store.create_token("qemu-admin", "admin")
    transport = httpx.ASGITransport(app=qplane.plane.app())  # no lifespan: the plane already runs
    async with httpx.AsyncClient(
        transport=transport, base_url="http://plane", headers={"Authorization": f"Bearer {token}"}
    ) as api:
        response = await api.post("/v1/hosts/a/maintenance", json={"strategy": "Migration"})
        assert response.status_code == 200, response.text
        plan = {i["vm"]: (i["action"], i["target"]) for i in response.json()["plan"]["items"]}
        assert plan == {"sh": ("Migrate", "b"), "lo": ("MigrateWithStorage", "b")}

        await eventually(lambda: qplane.host_state("a") == "Maintenance", timeout=LIMIT_S * 2)
        shown = (await api.get("/v1/hosts/a/maintenance")).json()
        assert shown["phase"] == "Completed" and shown["host_state"] == "Maintenance"
        assert shown["migrated_vms"] == {"sh": "b", "lo": "b"}
        assert shown["stopped_vms"] == []

        for vm in ("sh", "lo"):
            current = await qplane.wait_settled(vm, VMPhase.RUNNING)
            assert current.status.host == "b"
            assert get_condition(current.status.conditions, VMCondition.MIGRATION) is None, "it arrived"
            # the daemons themselves: live on b, gone from a
            assert await qplane.runs_on(vm) == ["b"]
            assert await qplane.info("a", vm) is None
            # still the same boot, still ticking over there
            log = qplane.console(vm)
            assert log.count("GUEST-UP") == 1, "the guest was never restarted"
            await console_shows(qplane.rig, qplane.domain(vm), "TICK", count=log.count("TICK") + 2)

        # shared: the one file both hosts see, never copied; local: copied to b's own pool
        started = {
            vm: [
                e.message
                for e in qplane.store.list_events(kind="VirtualMachine", name=vm)
                if e.reason == "MigrationStarted"
            ]
            for vm in ("sh", "lo")
        }
        assert len(started["sh"]) == 1 and "local disks" not in started["sh"][0]
        assert len(started["lo"]) == 1 and "with its local disks" in started["lo"][0]
        assert sector_holds(shared.status.path, ord("S"))
        assert qplane.store.get(Volume, "lo-root").spec.pool == "local-b"
        assert sector_holds(qplane.local_file("b", "lo-root"), ord("L"))
        assert not local_on_a.exists()

        response = await api.delete("/v1/hosts/a/maintenance")
        assert response.status_code == 200, response.text
        await eventually(lambda: qplane.host_state("a") == "Enabled", timeout=LIMIT_S)
        shown = (await api.get("/v1/hosts/a/maintenance")).json()
        assert shown["phase"] == "Cancelled"

    # the guests stay where they went (host.maintenance.return_vms is off)
    for vm in ("sh", "lo"):
        assert qplane.settled(vm, VMPhase.RUNNING) and qplane.vm(vm).status.host == "b"
        assert await qplane.runs_on(vm) == ["b"]
