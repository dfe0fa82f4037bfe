"""The Host says what its guests run under: KVM once a validation guest booted under it, TCG where
KVM is absent or broken (or no guests, as the admin chooses), on simulated hosts with each KVM."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import eventually
from tests.controllers.helpers import add_host
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.domain.conditions import HostCondition, get_condition
from virtplane.domain.resources import Accelerator, Host
from virtplane.drivers.sim._driver import SimDriver


def accelerator_of(plane: ControlPlane, name: str) -> Any:
    host = plane.store.get(Host, name)
    return host.status.accelerator, get_condition(host.status.conditions, HostCondition.ACCELERATOR)


@pytest.mark.parametrize(
    ("kvm", "offered", "used", "reason"),
    [
        ("works", [Accelerator.KVM, Accelerator.TCG], Accelerator.KVM, "KVMValidated"),
        ("broken", [Accelerator.KVM, Accelerator.TCG], Accelerator.TCG, "KVMBroken"),
        ("absent", [Accelerator.TCG], Accelerator.TCG, "KVMAbsent"),
    ],
)
async def test_each_host_reports_what_it_offers_and_uses(
    plane: ControlPlane, kvm: str, offered: list[Accelerator], used: Accelerator, reason: str
) -> None:
    add_host(plane, "h1", uri=f"sim://h1?kvm={kvm}")
    status, condition = await eventually(lambda: (a := accelerator_of(plane, "h1"))[1] and a)
    assert (status.offered, status.used, condition.reason) == (offered, used, reason), condition.message
    assert condition.status.value == "True"
    driver = plane.sim.driver("sim://h1")
    assert driver.accelerator is used  # what the driver defines its domains with


async def test_a_host_with_broken_kvm_is_refused_when_the_admin_says_so_and_its_vms_are_told(
    plane: ControlPlane,
) -> None:
    plane.settings.set("host.accelerator.kvm_broken", "refuse")
    add_host(plane, "h1", uri="sim://h1?kvm=broken")
    status, condition = await eventually(lambda: (a := accelerator_of(plane, "h1"))[1] and a)
    assert status.used is None and condition.status.value == "False" and condition.reason == "KVMBroken"
    assert "kvm_broken is refuse" in condition.message
    with pytest.raises(Exception, match="takes no guests"):
        from virtplane.drivers.base import DomainSpec

        await plane.sim.driver("sim://h1").ensure_defined(DomainSpec("virtplane-x", "x", "x", 1, 64))


async def test_the_override_wins_and_the_validation_boot_runs_once_per_fingerprint(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    boots: list[str] = []
    validate = SimDriver.validate_kvm

    async def counted(self: SimDriver, kernel: str, timeout_s: float) -> str:
        boots.append(self.uri)
        return await validate(self, kernel, timeout_s)

    monkeypatch.setattr(SimDriver, "validate_kvm", counted)
    add_host(plane, "h1", uri="sim://h1?kvm=works")
    await eventually(lambda: accelerator_of(plane, "h1")[1])
    for look in range(2):  # more looks, on a new connection (as after a restart of the control plane)
        await plane.hosts.drop("sim://h1?kvm=works")
        host = plane.store.get(Host, "h1")
        host.metadata.labels["look"] = str(look)  # a change wakes the host controller
        seen = asyncio.ensure_future(reconciled(plane, "h1", kind="Host"))
        plane.store.update(host)
        await seen
    assert boots == ["sim://h1"], "the verdict recorded for this libvirt/QEMU/host is reused"
    assert plane.sim.driver("sim://h1").accelerator is Accelerator.KVM  # told again after the drop

    host = plane.store.get(Host, "h1")
    host.spec.accelerator = Accelerator.TCG
    plane.store.update(host)
    status, _ = await eventually(lambda: (a := accelerator_of(plane, "h1"))[1].reason == "Overridden" and a)
    assert status.used is Accelerator.TCG and status.kvm_works is True, "the verdict stays recorded"
    assert boots == ["sim://h1"]


@pytest.mark.parametrize(
    ("uri", "setting", "spec", "reason"),
    [
        (
            "sim://h1",
            None,
            {"cpu_mode": "host-passthrough"},
            "cpu_mode host-passthrough needs KVM; it runs guests under tcg",
        ),
        ("sim://h1?kvm=broken", "refuse", {}, "takes no guests: its KVM is not usable"),
    ],
)
async def test_a_vm_asking_what_no_host_can_do_is_unschedulable_with_the_reason(
    plane: ControlPlane, uri: str, setting: str | None, spec: dict[str, Any], reason: str
) -> None:
    from tests.controllers.helpers import add_vm, vm
    from virtplane.domain.conditions import VMCondition
    from virtplane.domain.resources import RunPolicy

    if setting:
        plane.settings.set("host.accelerator.kvm_broken", setting)
    add_host(plane, "h1", uri=uri)
    await eventually(lambda: accelerator_of(plane, "h1")[1])
    add_vm(plane, "web", RunPolicy.ALWAYS_ON, **spec)
    condition = await eventually(
        lambda: (c := get_condition(vm(plane, "web").status.conditions, VMCondition.SCHEDULED)) and c
    )
    assert condition.reason == "Unschedulable" and f"h1: {reason}" in condition.message, condition.message


async def test_a_new_connection_defines_as_the_host_records_before_its_controller_looks(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.controllers.helpers import add_vm, wait_phase
    from virtplane.controllers.host import HostReconciler
    from virtplane.domain.resources import RunPolicy

    add_host(plane, "h1", uri="sim://h1?kvm=works")
    await eventually(lambda: accelerator_of(plane, "h1")[1])

    async def not_yet(*args: object) -> None:  # the host controller has not looked since
        return None

    monkeypatch.setattr(HostReconciler, "_accelerator", not_yet)
    driver = plane.sim.driver("sim://h1")
    driver.use_accelerator(Accelerator.TCG)  # what a new connection starts with
    add_vm(plane, "web", RunPolicy.ALWAYS_ON)
    await wait_phase(plane, "web", "Running")
    assert driver.accelerator is Accelerator.KVM
