"""``Volume.status.attached_vm`` (issue 11, part 3): set by the Volume controller, respected
by the API (409 VolumeAttached naming the holder), the VM controller and restore, and
released when the VM is deleted. On the simulator, whose own record (boots per domain,
volume content) says what really ran.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import LiveServer, eventually, wait_json
from tests.controllers.helpers import add_host, api_host_and_shared_pool, vm, wait_op
from tests.restore.test_restore import restore, snapshot
from virtplane.bootstrap import ControlPlane
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.resources import (
    Disk,
    Metadata,
    OperationPhase,
    PoolKind,
    RestoreMode,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.base import domain_name


def _vm_doc(name: str, *volumes: str) -> dict[str, Any]:
    disks = [{"volume": v} for v in volumes]
    return {"metadata": {"name": name}, "spec": {"run_policy": "AlwaysOn", "disks": disks}}


def test_the_api_refuses_a_second_vm_on_an_attached_volume_and_deletion_releases_it(
    live_server: LiveServer,
) -> None:
    with live_server.client("admin") as admin:
        api_host_and_shared_pool(admin)
        for name in ("data", "other"):
            volume = {"metadata": {"name": name}, "spec": {"pool": "shared", "size_gib": 1}}
            assert admin.post("/v1/volumes", json=volume).status_code == 201
    with live_server.client("operator") as op:
        assert op.post("/v1/vms", json=_vm_doc("a", "data")).status_code == 201
        wait_json(op, "/v1/vms/a", lambda v: v["status"]["phase"] == "Running")
        assert op.get("/v1/volumes/data").json()["status"]["attached_vm"] == "a"

        second = op.post("/v1/vms", json=_vm_doc("b", "other", "data"))
        assert second.status_code == 409, second.text
        assert second.json() == {
            "reason": "VolumeAttached",
            "message": "volume data is attached to VM a; a volume is a disk of one VM at a time",
        }
        assert op.post("/v1/vms", json=_vm_doc("b", "other")).status_code == 201
        taken = op.patch("/v1/vms/b", json={"spec": {"disks": [{"volume": "other"}, {"volume": "data"}]}})
        assert taken.status_code == 409 and taken.json()["reason"] == "VolumeAttached"
        assert "VM a" in taken.json()["message"]
        # a's own update that keeps its disk is fine
        assert op.patch("/v1/vms/a", json={"metadata": {"labels": {"x": "1"}}}).status_code == 200

        assert op.delete("/v1/vms/a").status_code in (200, 202)
        wait_json(op, "/v1/volumes/data", lambda v: v["status"]["attached_vm"] is None)
        assert op.get("/v1/vms/a").status_code == 404, "released only once the VM is gone"
        # b runs from "other": it keeps it (hot-plug never takes a boot disk out) and gets data too
        both = {"spec": {"disks": [{"volume": "other"}, {"volume": "data"}]}}
        assert op.patch("/v1/vms/b", json=both).status_code == 200
        wait_json(op, "/v1/volumes/data", lambda v: v["status"]["attached_vm"] == "b")
        events = op.get("/v1/events", params={"kind": "Volume", "name": "data"}).json()["items"]
        assert [e["message"] for e in events if e["reason"] in ("Attached", "Released")] == [
            "attached to VM a",
            "released by VM a",
            "attached to VM b",
        ]


async def _shared_volume(plane: ControlPlane, name: str) -> Volume:
    if plane.store.find(StoragePool, "shared") is None:
        plane.store.create(
            StoragePool(
                metadata=Metadata(name="shared"),
                spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster="default", capacity_gib=50),
            )
        )
    plane.store.create(Volume(metadata=Metadata(name=name), spec=VolumeSpec(pool="shared", size_gib=1)))
    await eventually(lambda: plane.store.get(Volume, name).status.phase is VolumePhase.READY)
    return plane.store.get(Volume, name)


def _boots(plane: ControlPlane, vm_name: str) -> int:
    host = plane.sim.host_named("h1")
    domain = host.domains.get(domain_name(vm(plane, vm_name).metadata.uid)) if host else None
    return domain.boots if domain is not None else 0


async def test_two_vms_written_at_once_never_both_get_the_disk(plane: ControlPlane) -> None:
    """Two VMs on one volume that raced past the API (written straight to the store, as two
    replicas could): the first created runs, the other waits and says why, without one boot."""
    add_host(plane)
    await _shared_volume(plane, "data")
    for name in ("first", "second"):
        plane.store.create(
            VirtualMachine(
                metadata=Metadata(name=name),
                spec=VirtualMachineSpec(run_policy=RunPolicy.ALWAYS_ON, disks=[Disk(volume="data")]),
            )
        )
    await eventually(lambda: vm(plane, "first").status.phase is VMPhase.RUNNING)
    waiting = await eventually(
        lambda: (
            (c := get_condition(vm(plane, "second").status.conditions, VMCondition.DISKS_READY))
            and c.status.value == "False"
            and c
        )
    )
    assert waiting.message == "volume data is attached to VM first"
    assert plane.store.get(Volume, "data").status.attached_vm == "first"
    assert vm(plane, "second").status.phase is VMPhase.PENDING
    assert _boots(plane, "second") == 0, "the second VM never booted on the disk"

    plane.store.mutate(
        VirtualMachine, "first", lambda v: setattr(v.metadata, "deletion_requested_at", plane.ctx.now())
    )
    await eventually(lambda: vm(plane, "second").status.phase is VMPhase.RUNNING)
    assert plane.store.find(VirtualMachine, "first") is None
    assert plane.store.get(Volume, "data").status.attached_vm == "second"


async def test_a_restore_never_takes_a_disk_attached_to_another_vm(plane: ControlPlane) -> None:
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    add_host(plane)
    data = await _shared_volume(plane, "data")
    await _shared_volume(plane, "root")
    plane.store.create(
        VirtualMachine(
            metadata=Metadata(name="a"),
            spec=VirtualMachineSpec(
                run_policy=RunPolicy.MANUAL, disks=[Disk(volume="root"), Disk(volume="data")]
            ),
        )
    )
    await eventually(lambda: vm(plane, "a").status.phase is VMPhase.STOPPED)
    snap = await snapshot(plane, "a")
    # a gives the data disk up; b takes it and writes to it
    plane.store.mutate(VirtualMachine, "a", lambda v: setattr(v.spec, "disks", [Disk(volume="root")]))
    await eventually(lambda: plane.store.get(Volume, "data").status.attached_vm is None)
    plane.store.create(
        VirtualMachine(
            metadata=Metadata(name="b"),
            spec=VirtualMachineSpec(run_policy=RunPolicy.ALWAYS_ON, disks=[Disk(volume="data")]),
        )
    )
    await eventually(lambda: vm(plane, "b").status.phase is VMPhase.RUNNING)
    plane.sim.write_volume(data.status.path, "b's data")

    strict = await wait_op(plane, restore(plane, "a", snap.metadata.name, RestoreMode.STRICT))
    assert (strict.status.phase, strict.status.reason) == (OperationPhase.FAILED, "VolumeAttached")
    assert strict.status.message.startswith("Strict restore: volume data is attached to VM b now")
    assert strict.status.step == "Validate", "refused before the VM was touched"

    best = await wait_op(plane, restore(plane, "a", snap.metadata.name, RestoreMode.BEST_EFFORT))
    assert best.status.phase is OperationPhase.COMPLETED, best.status.message
    assert best.status.progress["volume/data"] == "attached to VM b: skipped"
    assert [d.volume for d in vm(plane, "a").spec.disks] == ["root"]
    assert plane.sim.read_volume(data.status.path) == "b's data", "b's disk was not reverted"
    assert plane.store.get(Volume, "data").status.attached_vm == "b"
    assert vm(plane, "b").status.phase is VMPhase.RUNNING
