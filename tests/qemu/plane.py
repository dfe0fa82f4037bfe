"""A control plane on the rig's two libvirt daemons, and what tests read from it and from them.

``QemuPlane`` wraps a ``ControlPlane`` whose Host resources carry the rig's ``qemu+unix://``
URIs, with a shared directory pool (seen by both daemons) and a local pool per host at
/var/lib/libvirt/images (each daemon's own); the ``qplane`` fixture (conftest) builds it.
The guests are the busybox test guest (192 MiB): their serial consoles show ``GUEST-UP`` and
``DISK0: <first 16 bytes of vda>`` at boot, ``TICK n`` every 2 s, and the kernel's
``POWERED_DOWN`` when they power off in order (on the ACPI power button); a destroyed guest
says nothing more. A guest with a NoCloud seed says what it took from it before GUEST-UP
(``cidata: hostname NAME``, ``cidata: eth0 ADDRESS/PREFIX via GATEWAY mac MAC``) and runs a
user data that starts with ``#!``. That is what tests read besides the drivers' own view.
"""

from __future__ import annotations

import itertools
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import eventually
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.storage import volume_file
from virtplane.domain.intents import read_intents, read_migration
from virtplane.domain.resources import (
    Accelerator,
    Boot,
    Capacity,
    Disk,
    Host,
    HostConnection,
    HostSpec,
    Image,
    ImageKind,
    ImagePhase,
    ImageSpec,
    Metadata,
    OperationPhase,
    OperationType,
    PoolContent,
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

from .conftest import INITRD_FILE, KERNEL_FILE, LOCAL_IMAGES, Rig

SHARED = "shared"
POWERED_DOWN = "reboot: Power down"
LIMIT_S = 120.0  # guards against a hang only; a TCG boot takes 3-5 s
_ids = itertools.count(1)


@dataclass
class QemuPlane:
    plane: ControlPlane
    rig: Rig
    drivers: dict[str, Any]  # independent connections to the daemons, to check what really runs
    accelerator: Accelerator = Accelerator.TCG  # the hosts' spec.accelerator: the rig's verdict

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

    async def add_host(
        self,
        name: str,
        *,
        enabled: bool = True,
        migration_address: str | None = None,
        accelerator: Accelerator | None = None,
    ) -> None:
        self.store.create(
            Host(
                metadata=Metadata(name=name),
                spec=HostSpec(
                    uri=self.rig.hosts[name].uri,
                    capacity=Capacity(vcpus=4, memory_mib=2048),
                    enabled=enabled,
                    migration_address=migration_address,
                    accelerator=accelerator or self.accelerator,
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
        """Where a host's local file of ``volume`` is, seen from this process."""
        return self.rig.base / "hosts" / host / "lib" / "images" / volume_file(self.store.get(Volume, volume))

    def add_vm(
        self, name: str, policy: RunPolicy, *volumes: str, grace_s: int = 20, cmdline: str = "", **spec: Any
    ) -> VirtualMachine:
        """A guest booting the test kernel; the first volume is its /dev/vda; ``cmdline`` adds kernel
        arguments (``vp.ignore_acpi=1``, see build-initrd.sh); ``spec`` adds fields (``nics``,
        ``cloud_init``)."""
        return self.store.create(
            VirtualMachine(
                metadata=Metadata(name=name, labels={"scenario": "qemu"}),
                spec=VirtualMachineSpec(
                    run_policy=policy,
                    cpu=1,
                    memory_mib=192,
                    disks=[Disk(volume=v, boot_order=i + 1) for i, v in enumerate(volumes)],
                    termination_grace_period_s=grace_s,
                    boot=Boot(
                        kernel="guest-kernel",
                        initrd="guest-initrd",
                        cmdline=f"console=ttyS0 panic=-1 quiet {cmdline}".strip(),
                    ),
                    **spec,
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

    async def wait_held_stopped(self, vm: str) -> VirtualMachine:
        """Stopped and held (by an operation or a maintenance), with no stop left to carry out."""

        def held() -> bool:
            current = self.vm(vm)
            intents = read_intents(current.metadata.annotations)
            return (
                current.status.phase is VMPhase.STOPPED and intents.held_by is not None and not intents.stop
            )

        await eventually(held, timeout=LIMIT_S)
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
        op = await self.finished(vm, kind, **spec)
        assert op.status.phase is OperationPhase.COMPLETED, (op.status.reason, op.status.message)
        return op

    async def finished(self, vm: str, kind: OperationType, **spec: Any) -> VirtualMachineOperation:
        """A new operation on ``vm`` once it has finished, however it did."""
        name = f"{vm}-{kind.value.lower()}-{next(_ids)}"
        self.store.create(
            VirtualMachineOperation(
                metadata=Metadata(name=name), spec=VirtualMachineOperationSpec(vm=vm, type=kind, **spec)
            )
        )
        await eventually(
            lambda: self.store.get(VirtualMachineOperation, name).status.phase.finished, timeout=LIMIT_S
        )
        return self.store.get(VirtualMachineOperation, name)

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

    def api(self) -> httpx.AsyncClient:
        """The plane's own REST API, in process, as an admin (no lifespan: the plane already runs)."""
        token = self.store.create_token(f"qemu-admin-{next(_ids)}", "admin")
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.plane.app()),
            base_url="http://plane",
            headers={"Authorization": f"Bearer {token}"},
        )

    def events(self, vm: str) -> list[tuple[str, str]]:
        return [(e.reason, e.message) for e in self.store.list_events(kind="VirtualMachine", name=vm)]

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
                await driver.delete_volume(self.rig.shared_pool, volume_file(volume))
                await driver.delete_volume(self.rig.local_pool, volume_file(volume))


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


GUEST_IMAGES = ("guest-kernel", "guest-initrd")


def add_guest_images(store: Store, rig: Rig) -> None:
    """The rig's image library and the guest's kernel and initrd in it, as an admin adds them."""
    store.create(
        StoragePool(
            metadata=Metadata(name="library"),
            spec=StoragePoolSpec(
                kind=PoolKind.SHARED,
                cluster="default",
                path=rig.library_pool.path,
                capacity_gib=10,
                content=PoolContent.IMAGES,
            ),
        )
    )
    for name, file, kind in (
        (GUEST_IMAGES[0], KERNEL_FILE, ImageKind.KERNEL),
        (GUEST_IMAGES[1], INITRD_FILE, ImageKind.INITRD),
    ):
        store.create(
            Image(metadata=Metadata(name=name), spec=ImageSpec(pool="library", file=file, kind=kind))
        )


async def guest_images_ready(store: Store) -> None:
    """Until the guest's kernel and initrd are Ready (a host that sees the library is up): the
    API refuses a VM that boots from an image still Pending (422 ImageNotReady)."""
    for name in GUEST_IMAGES:
        await eventually(
            lambda name=name: store.get(Image, name).status.phase is ImagePhase.READY, timeout=LIMIT_S
        )
