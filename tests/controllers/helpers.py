"""Seeding and waiting helpers for controller tests on the simulated driver."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest

from tests.conftest import eventually
from virtplane.bootstrap import ControlPlane
from virtplane.domain.intents import read_intents
from virtplane.domain.resources import (
    Capacity,
    Host,
    HostSpec,
    Metadata,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
)
from virtplane.drivers.base import domain_name

_ids = itertools.count(1)


def add_host(
    plane: ControlPlane, name: str = "h1", vcpus: int = 16, memory_mib: int = 32768, uri: str | None = None
) -> Host:
    """A simulated host by default; pass ``uri`` for another driver (e.g. libvirt's test:///)."""
    return plane.store.create(
        Host(
            metadata=Metadata(name=name),
            spec=HostSpec(uri=uri or f"sim://{name}", capacity=Capacity(vcpus=vcpus, memory_mib=memory_mib)),
        )
    )


def api_host_and_shared_pool(admin: httpx.Client, pool: str = "shared", capacity_gib: int = 50) -> None:
    """Simulated host h1 and a shared pool of the default cluster, made through the API."""
    host = {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}
    assert admin.post("/v1/hosts", json=host).status_code == 201
    doc = {
        "metadata": {"name": pool},
        "spec": {"kind": "shared", "cluster": "default", "capacity_gib": capacity_gib},
    }
    assert admin.post("/v1/storagepools", json=doc).status_code == 201


def add_vm(plane: ControlPlane, name: str, policy: RunPolicy, **spec: Any) -> VirtualMachine:
    return plane.store.create(
        VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(run_policy=policy, **spec))
    )


def vm(plane: ControlPlane, name: str) -> VirtualMachine:
    return plane.store.get(VirtualMachine, name)


async def wait_phase(plane: ControlPlane, name: str, phase: str, timeout: float = 10.0) -> VirtualMachine:
    await eventually(lambda: vm(plane, name).status.phase.value == phase, timeout=timeout)
    return vm(plane, name)


async def wait_settled(plane: ControlPlane, name: str, phase: str, timeout: float = 10.0) -> VirtualMachine:
    """The phase is reached and no intent is left over."""

    def check() -> bool:
        current = vm(plane, name)
        intents = read_intents(current.metadata.annotations)
        return current.status.phase.value == phase and not (intents.start or intents.stop or intents.restart)

    await eventually(check, timeout=timeout)
    return vm(plane, name)


def operate(plane: ControlPlane, vm_name: str, kind: OperationType, force: bool = False) -> str:
    name = f"{vm_name}-{kind.value.lower()}-{next(_ids)}"
    plane.store.create(
        VirtualMachineOperation(
            metadata=Metadata(name=name), spec=VirtualMachineOperationSpec(vm=vm_name, type=kind, force=force)
        )
    )
    return name


async def wait_op(plane: ControlPlane, name: str, timeout: float = 10.0) -> VirtualMachineOperation:
    await eventually(
        lambda: plane.store.get(VirtualMachineOperation, name).status.phase.finished, timeout=timeout
    )
    return plane.store.get(VirtualMachineOperation, name)


def fault(plane: ControlPlane, host: str, kind: str, vm_name: str | None = None, count: int = 1) -> None:
    domain = domain_name(vm(plane, vm_name).metadata.uid) if vm_name else None
    plane.sim.inject(host, kind, domain, count)


def event_reasons(plane: ControlPlane, name: str) -> list[str]:
    return [e.reason for e in plane.store.list_events(kind="VirtualMachine", name=name, limit=1000)]


def phase_history(monkeypatch: pytest.MonkeyPatch, plane: ControlPlane, name: str) -> list[str]:
    """Every phase written for VM ``name`` from now on, in order: the complete record, not samples."""
    written: list[str] = []
    update = plane.store._update  # every update, update_status and mutate goes through it

    def recording_update(obj: Any, **kwargs: Any) -> Any:
        stored = update(obj, **kwargs)
        if isinstance(stored, VirtualMachine) and stored.metadata.name == name:
            written.append(stored.status.phase.value)
        return stored

    monkeypatch.setattr(plane.store, "_update", recording_update)
    return written
