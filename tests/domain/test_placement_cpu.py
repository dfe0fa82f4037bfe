"""Placement and the maintenance plan know CPUs: a host that takes no guests, host-passthrough
VMs (KVM only, migrating only to identical CPUs), and migrations between accelerators."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.domain.test_maintenance_plan import SOURCE, host, planned, source
from virtplane.domain.maintenance_plan import PlanAction, Strategy, plan_maintenance
from virtplane.domain.placement import HostView, VMView, choose_host

EPYC, HASWELL = "AMD/EPYC/+x2apic/-", "Intel/Haswell/+x2apic/-"
KVM_EPYC = {"accelerator": "kvm", "cpu_signature": EPYC}


def kvm_source(**changes: object) -> HostView:
    return replace(source(), **{**KVM_EPYC, **changes})  # type: ignore[arg-type]


def passthrough(name: str = "vm") -> VMView:
    return replace(planned(name).vm, cpu_passthrough=True)


@pytest.mark.parametrize(
    ("the_vm", "src", "target", "reason"),
    [
        # cluster-mode VMs go anywhere of the same accelerator
        (planned("vm").vm, kvm_source(), host("t1", **{**KVM_EPYC, "cpu_signature": HASWELL}), None),
        (
            planned("vm").vm,
            kvm_source(),
            host("t1", accelerator="tcg"),
            "runs guests under tcg, the VM runs under kvm on h0",
        ),
        (planned("vm").vm, kvm_source(), host("t1", **KVM_EPYC, takes_guests=False), "takes no guests"),
        # host-passthrough: identical CPUs under KVM only
        (passthrough(), kvm_source(), host("t1", **KVM_EPYC), None),
        (
            passthrough(),
            kvm_source(),
            host("t1", accelerator="kvm", cpu_signature=HASWELL),
            "not identical to h0's",
        ),
        (
            passthrough(),
            kvm_source(),
            host("t1", accelerator="tcg", cpu_signature=EPYC),
            "needs KVM; it runs guests under tcg",
        ),
    ],
)
def test_a_migration_goes_only_where_the_cpu_follows(
    the_vm: VMView, src: HostView, target: HostView, reason: str | None
) -> None:
    choice = choose_host(the_vm, [src, target], migration=True)
    if reason is None:
        assert choice.host == "t1", choice.reasons
    else:
        assert choice.host is None and reason in choice.reasons["t1"], choice.reasons
    # the maintenance plan asks the same question: a VM that cannot follow is blocked, with the reason
    plan = plan_maintenance(SOURCE, [replace(planned("vm"), vm=the_vm)], [src, target], Strategy.MIGRATION)
    [item] = plan.items
    assert (item.action is PlanAction.MIGRATE) == (reason is None), item
    if reason is not None:
        assert reason in item.reason, item.reason


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (host("t1", accelerator="kvm"), None),
        (host("t1", accelerator="tcg"), "cpu_mode host-passthrough needs KVM; it runs guests under tcg"),
        (host("t1"), "needs KVM; it runs guests under an unknown accelerator"),
    ],
)
def test_a_host_passthrough_vm_starts_on_kvm_hosts_only(target: HostView, reason: str | None) -> None:
    choice = choose_host(replace(passthrough(), host=None), [target])
    assert choice.host == (None if reason else "t1")
    if reason:
        assert reason in choice.reasons["t1"]
