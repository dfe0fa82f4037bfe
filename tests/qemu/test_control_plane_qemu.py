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

import itertools
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import eventually
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.intents import read_intents, read_migration
from virtplane.domain.resources import (
    Boot,
    Capacity,
    Disk,
    Host,
    HostConnection,
    HostSpec,
    Metadata,
    OperationPhase,
    OperationType,
    PoolKind,
    RestoreMode,
    RestoreSpec,
    RunPolicy,
    SnapshotPhase,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotSpec,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.base import DomainInfo, DomainState, domain_name
from virtplane.store.store import Store

from .conftest import INITRD, KERNEL, LOCAL_IMAGES, Rig, console_shows

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

SHARED = "shared"
LIMIT_S = 120.0  # guards against a hang only; a TCG boot takes 3-5 s
_ids = itertools.count(1)


# --------------------------------------------------------------------------- the plane on the rig


@dataclass
class QemuPlane:
    plane: ControlPlane
    rig: Rig
    drivers: dict[str, Any]  # independent connections to the daemons, to check what really runs

    @property
    def store(self) -> Store:
        return self.plane.store

    def vm(self, name: str) -> VirtualMachine:
        return self.store.get(VirtualMachine, name)

    def domain(self, vm: str) -> str:
        return domain_name(self.vm(vm).metadata.uid)

    def console(self, vm: str) -> str:
        return self.rig.console(self.domain(vm))

    def host_state(self, name: str) -> str:
        return self.store.get(Host, name).status.resource_state.value

    async def add_host(self, name: str, *, enabled: bool = True) -> None:
        self.store.create(
            Host(
                metadata=Metadata(name=name),
                spec=HostSpec(
                    uri=self.rig.hosts[name].uri,
                    capacity=Capacity(vcpus=4, memory_mib=2048),
                    enabled=enabled,
                ),
            )
        )
        self.store.create(
            StoragePool(
                metadata=Metadata(name=f"local-{name}"),
                spec=StoragePoolSpec(
                    kind=PoolKind.LOCAL, host=name, driver_pool="local", path=LOCAL_IMAGES, capacity_gib=20
                ),
            )
        )
        await eventually(
            lambda: self.store.get(Host, name).status.connection is HostConnection.UP, timeout=LIMIT_S
        )
        await eventually(
            lambda: self.store.get(StoragePool, f"local-{name}").status.reachable_hosts == [name],
            timeout=LIMIT_S,
        )
        await eventually(
            lambda: name in self.store.get(StoragePool, SHARED).status.reachable_hosts, timeout=LIMIT_S
        )

    async def add_volume(self, name: str, pool: str = SHARED) -> Volume:
        self.store.create(Volume(metadata=Metadata(name=name), spec=VolumeSpec(pool=pool, size_gib=1)))
        await eventually(
            lambda: self.store.get(Volume, name).status.phase is VolumePhase.READY, timeout=LIMIT_S
        )
        return self.store.get(Volume, name)

    def local_file(self, host: str, volume: str) -> Path:
        """Where a host's /var/lib/libvirt/images/<volume> is, seen from this process."""
        return self.rig.base / "hosts" / host / "lib" / "images" / volume

    def add_vm(self, name: str, policy: RunPolicy, volume: str) -> VirtualMachine:
        return self.store.create(
            VirtualMachine(
                metadata=Metadata(name=name, labels={"scenario": "qemu"}),
                spec=VirtualMachineSpec(
                    run_policy=policy,
                    cpu=1,
                    memory_mib=192,
                    disks=[Disk(volume=volume, boot_order=1)],
                    termination_grace_period_s=20,
                    boot=Boot(kernel=str(KERNEL), initrd=str(INITRD), cmdline="console=ttyS0 panic=-1 quiet"),
                ),
            )
        )

    def settled(self, vm: str, phase: VMPhase) -> bool:
        current = self.vm(vm)
        intents = read_intents(current.metadata.annotations)
        return (
            current.status.phase is phase
            and not (intents.start or intents.stop or intents.restart)
            and intents.held_by is None
            and intents.restore_power_state is None
            and read_migration(current.metadata.annotations) is None
        )

    async def wait_settled(self, vm: str, phase: VMPhase) -> VirtualMachine:
        await eventually(lambda: self.settled(vm, phase), timeout=LIMIT_S)
        return self.vm(vm)

    async def info(self, host: str, vm: str) -> DomainInfo | None:
        info: DomainInfo | None = await self.drivers[host].get_info(self.domain(vm))
        return info

    async def runs_on(self, vm: str) -> list[str]:
        """The daemons where the VM's domain is live, asked directly (not through the plane)."""
        live = []
        for host in sorted(self.drivers):
            info = await self.info(host, vm)
            if info is not None and info.state in (DomainState.RUNNING, DomainState.MIGRATING):
                live.append(host)
        return live

    async def operate(self, vm: str, kind: OperationType, **spec: Any) -> VirtualMachineOperation:
        name = f"{vm}-{kind.value.lower()}-{next(_ids)}"
        self.store.create(
            VirtualMachineOperation(
                metadata=Metadata(name=name), spec=VirtualMachineOperationSpec(vm=vm, type=kind, **spec)
            )
        )
        await eventually(
            lambda: self.store.get(VirtualMachineOperation, name).status.phase.finished, timeout=LIMIT_S
        )
        op = self.store.get(VirtualMachineOperation, name)
        assert op.status.phase is OperationPhase.COMPLETED, (op.status.reason, op.status.message)
        return op

    async def restore(self, vm: str, snapshot: str) -> VirtualMachineOperation:
        return await self.operate(
            vm, OperationType.RESTORE, restore=RestoreSpec(snapshot=snapshot, mode=RestoreMode.STRICT)
        )

    async def snapshot(self, vm: str, *, with_memory: bool = False) -> VirtualMachineSnapshot:
        name = f"{vm}-snap-{next(_ids)}"
        self.store.create(
            VirtualMachineSnapshot(
                metadata=Metadata(name=name), spec=VirtualMachineSnapshotSpec(vm=vm, with_memory=with_memory)
            )
        )
        await eventually(
            lambda: (
                self.store.get(VirtualMachineSnapshot, name).status.phase
                in (SnapshotPhase.READY, SnapshotPhase.FAILED)
            ),
            timeout=LIMIT_S,
        )
        snap = self.store.get(VirtualMachineSnapshot, name)
        assert snap.status.phase is SnapshotPhase.READY, snap.status.message
        return snap

    async def cleanup(self) -> None:
        """Remove this test's domains, volumes and disk snapshots from both daemons."""
        for vm in self.store.list_objects(VirtualMachine):
            name = domain_name(vm.metadata.uid)
            for driver in self.drivers.values():
                await driver.destroy(name)
                await driver.undefine(name)
        for snap in self.store.list_objects(VirtualMachineSnapshot):
            for disk in snap.status.disk_snapshots:
                await self.drivers["a"].delete_volume_snapshot(disk.handle)
        for volume in self.store.list_objects(Volume):
            for driver in self.drivers.values():
                await driver.delete_volume(self.rig.shared_pool, volume.metadata.name)
                await driver.delete_volume(self.rig.local_pool, volume.metadata.name)


def write_marker(path: str | Path, byte: int) -> None:
    """Fill the first sector of a qcow2 image whose guest is not running."""
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", f"write -P {byte:#x} 0 512", str(path)],
        check=True,
        capture_output=True,
    )


def sector_holds(path: str | Path, byte: int) -> bool:
    """Whether the first sector of a qcow2 image is ``byte`` (read-only, shared with a running guest)."""
    out = subprocess.run(
        ["qemu-io", "-r", "-U", "-f", "qcow2", "-c", f"read -P {byte:#x} 0 512", str(path)],
        capture_output=True,
        text=True,
    )
    return out.returncode == 0 and "Pattern verification failed" not in out.stdout + out.stderr


def disk0(byte: int) -> str:
    return "DISK0: " + chr(byte) * 16


@pytest.fixture
async def qplane(store: Store, rig: Rig, drivers: dict[str, Any]) -> AsyncIterator[QemuPlane]:
    """A control plane managing the rig's two daemons (Host a, b), a shared and a local pool each."""
    plane = ControlPlane(store, options=ControlPlaneOptions(workers=4, console_dir=str(rig.console_dir)))
    plane.settings.set("vm.start.backoff_base_s", 0.5)
    plane.settings.set("vm.start.backoff_cap_s", 5.0)
    result = QemuPlane(plane, rig, drivers)
    store.create(
        StoragePool(
            metadata=Metadata(name=SHARED),
            spec=StoragePoolSpec(
                kind=PoolKind.SHARED, cluster="default", path=rig.shared_pool.path, capacity_gib=100
            ),
        )
    )
    await plane.start()
    try:
        yield result
    finally:
        await plane.stop()
        await result.cleanup()


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
    assert local.status.path == f"{LOCAL_IMAGES}/lo-root" and local_on_a.exists()
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
            migrated = get_condition(current.status.conditions, VMCondition.MIGRATION)
            assert migrated is not None and migrated.reason == "Migrated"
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
