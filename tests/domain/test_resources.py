from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from virtplane.domain.resources import (
    KIND_BY_PLURAL,
    Host,
    StoragePool,
    VirtualMachine,
    VirtualMachineOperation,
)


def vm_doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "virtplane.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "web-1"},
        "spec": spec,
    }


def test_a_manifest_round_trips() -> None:
    vm = VirtualMachine.model_validate(
        vm_doc(cpu=2, memory_mib=1024, disks=[{"volume": "root", "boot_order": 1}])
    )
    dumped = vm.model_dump(mode="json")
    assert dumped["apiVersion"] == "virtplane.io/v1"
    assert dumped["spec"]["run_policy"] == "AlwaysOnUnlessStoppedManually"
    assert VirtualMachine.model_validate(dumped) == vm


@pytest.mark.parametrize(
    "name", ["Web", "web_1", "-web", "web-", "a" * 64, "", "web.1", "we b", "<x>", "../etc"]
)
def test_names_must_be_dns_labels(name: str) -> None:
    doc = vm_doc()
    doc["metadata"]["name"] = name
    with pytest.raises(ValidationError, match="DNS-1123"):
        VirtualMachine.model_validate(doc)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"cpu": 0}, "cpu"),
        ({"cpu": 1000}, "cpu"),
        ({"memory_mib": 0}, "memory_mib"),
        ({"memory_mib": 10**9}, "memory_mib"),
        ({"run_policy": "Sometimes"}, "run_policy"),
        ({"termination_grace_period_s": -1}, "termination_grace_period_s"),
        ({"colour": "blue"}, "colour"),
        ({"disks": [{"volume": "a"}, {"volume": "a"}]}, "listed twice"),
    ],
)
def test_bad_specs_are_refused(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        VirtualMachine.model_validate(vm_doc(**spec))
    assert field in str(info.value)


def test_wrong_kind_is_refused() -> None:
    doc = vm_doc()
    doc["kind"] = "Host"
    with pytest.raises(ValidationError, match="expected 'VirtualMachine'"):
        VirtualMachine.model_validate(doc)


def test_pool_scope_rules() -> None:
    with pytest.raises(ValidationError, match=r"needs spec\.host"):
        StoragePool.model_validate({"metadata": {"name": "p"}, "spec": {"kind": "local", "capacity_gib": 1}})
    with pytest.raises(ValidationError, match=r"spec.hosts or spec.cluster"):
        StoragePool.model_validate({"metadata": {"name": "p"}, "spec": {"kind": "shared", "capacity_gib": 1}})
    ok = StoragePool.model_validate(
        {"metadata": {"name": "p"}, "spec": {"kind": "shared", "cluster": "c1", "capacity_gib": 1}}
    )
    assert ok.spec.cluster == "c1"


def test_operation_parameters_match_the_type() -> None:
    with pytest.raises(ValidationError, match=r"needs spec\.restore"):
        VirtualMachineOperation.model_validate(
            {"metadata": {"name": "o"}, "spec": {"vm": "a", "type": "Restore"}}
        )
    with pytest.raises(ValidationError, match="only for type Restore"):
        VirtualMachineOperation.model_validate(
            {"metadata": {"name": "o"}, "spec": {"vm": "a", "type": "Start", "restore": {"snapshot": "s"}}}
        )


def test_host_capacity_is_bounded() -> None:
    with pytest.raises(ValidationError):
        Host.model_validate(
            {"metadata": {"name": "h"}, "spec": {"uri": "sim://h", "capacity": {"vcpus": 0, "memory_mib": 1}}}
        )


def test_every_kind_has_a_unique_plural() -> None:
    assert set(KIND_BY_PLURAL) == {
        "hosts",
        "storagepools",
        "images",
        "networks",
        "volumes",
        "vms",
        "snapshots",
        "operations",
        "settings",
        "secrets",
        "maintenances",
        "backuptargets",
        "backups",
        "backuppolicies",
        "placementrules",
    }
