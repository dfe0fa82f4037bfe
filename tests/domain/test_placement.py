"""Choosing a host for a VM: filters, reasons, the spread rule and reservations."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtplane.domain.placement import (
    Choice,
    HostView,
    VMView,
    allocatable,
    choose_host,
    explain,
    migration_refusal,
    reserve,
)
from virtplane.domain.resources import Capability as C
from virtplane.domain.resources import HostResourceState as S


def host(name: str, **changes: object) -> HostView:
    base = HostView(
        name=name,
        cluster="c1",
        state=S.ENABLED,
        connected=True,
        vcpus=8,
        memory_mib=8192,
        shared_pools=frozenset({"pool-a"}),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def vm(name: str = "vm1", **changes: object) -> VMView:
    base = VMView(name=name, cpu=2, memory_mib=1024, host="src", shared_pools=frozenset({"pool-a"}))
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "the_vm", "copy", "reason"),
    [
        (host("h", state=S.MAINTENANCE), vm(), False, "in Maintenance"),
        (host("h", state=S.PREPARE_FOR_MAINTENANCE), vm(), False, "in PrepareForMaintenance"),
        (host("h", state=S.ERROR_IN_MAINTENANCE), vm(), False, "in ErrorInMaintenance"),
        (
            host("h", state=S.ERROR_IN_PREPARE_FOR_MAINTENANCE),
            vm(),
            False,
            "in ErrorInPrepareForMaintenance",
        ),
        (host("h", state=S.DISABLED), vm(), False, "disabled"),
        (host("h", connected=False), vm(), False, "disconnected"),
        (host("h"), vm(host="h"), False, "current host of the VM"),
        (host("h", cluster="c2"), vm(cluster="c1"), False, "in cluster c2, VM needs cluster c1"),
        (host("h"), vm(host_affinity=frozenset({"other"})), False, "not in host_affinity"),
        (host("h", shared_pools=frozenset()), vm(), False, "shared pool pool-a not attached"),
        (
            host("h", shared_pools=frozenset({"pool-a"})),
            vm(shared_pools=frozenset({"pool-a", "pool-c", "pool-b"})),
            False,
            "shared pool pool-b not attached",
        ),
        (
            host("h", networks=frozenset({"lan"})),
            vm(networks=frozenset({"lan", "san"})),
            False,
            "network san is not on this host",
        ),
        (host("h", used_vcpus=7), vm(), False, "not enough vCPUs: 1 free, 2 needed"),
        (host("h", used_memory_mib=7680), vm(), False, "not enough memory: 512 MiB free, 1024 needed"),
        (
            host("h", anti_affinity_groups=frozenset({"db"})),
            vm(anti_affinity_group="db"),
            False,
            "anti-affinity group db already there",
        ),
        (host("h"), vm(local_disks_gib={"pool-x": 20}), True, "no local pool pool-x with 20 GiB free"),
        (
            host("h", local_pool_free_gib={"pool-x": 19}),
            vm(local_disks_gib={"pool-x": 20}),
            True,
            "no local pool pool-x with 20 GiB free",
        ),
        (host("h"), vm(local_disks_gib={"pool-x": 20}), False, "local pool pool-x is not on this host"),
    ],
)
def test_each_rejection_has_its_reason(target: HostView, the_vm: VMView, copy: bool, reason: str) -> None:
    choice = choose_host(the_vm, [target], copy_local_disks=copy)
    assert choice == Choice(host=None, reasons={"h": reason})


def test_excluded_hosts_are_rejected() -> None:
    choice = choose_host(vm(), [host("a"), host("b")], exclude=frozenset({"a"}))
    assert choice.host == "b"
    assert choice.reasons == {"a": "excluded"}


@pytest.mark.parametrize(
    ("target", "the_vm", "copy"),
    [
        (host("h"), vm(), False),
        (host("h", used_vcpus=6, used_memory_mib=7168), vm(), False),  # exactly full afterwards
        (host("h", cluster="c2"), vm(cluster=None), False),
        (host("h"), vm(host_affinity=frozenset({"h", "x"})), False),
        (host("h", anti_affinity_groups=frozenset({"web"})), vm(anti_affinity_group="db"), False),
        (host("h", local_pool_free_gib={"pool-x": 20}), vm(local_disks_gib={"pool-x": 20}), True),
        (host("h", local_pool_free_gib={"pool-x": 0}), vm(local_disks_gib={"pool-x": 20}), False),
        (host("h"), vm(host=None), False),
    ],
)
def test_hosts_that_fit_are_chosen(target: HostView, the_vm: VMView, copy: bool) -> None:
    assert choose_host(the_vm, [target], copy_local_disks=copy) == Choice(host="h", reasons={})


def test_most_free_memory_wins_then_name() -> None:
    hosts = [
        host("c", used_memory_mib=1000),
        host("b", used_memory_mib=0),
        host("a", used_memory_mib=0),
        host("d", state=S.DISABLED),
    ]
    assert choose_host(vm(), hosts).host == "a"
    assert choose_host(vm(), hosts[:1]).host == "c"
    bigger = host("z", memory_mib=16384, used_memory_mib=4096)
    assert choose_host(vm(), [*hosts, bigger]).host == "z"


def test_choice_does_not_depend_on_host_order() -> None:
    hosts = [host("a", used_memory_mib=512), host("b"), host("c"), host("d", connected=False)]
    first = choose_host(vm(), hosts)
    assert first.host == "b"
    assert choose_host(vm(), list(reversed(hosts))) == first


def test_reasons_are_kept_when_a_host_is_chosen() -> None:
    choice = choose_host(vm(), [host("a", state=S.MAINTENANCE), host("b")])
    assert choice.host == "b"
    assert choice.reasons == {"a": "in Maintenance"}


def test_no_hosts() -> None:
    assert choose_host(vm(), []) == Choice(host=None, reasons={})


def test_reserve_adds_the_vm() -> None:
    before = host(
        "h",
        used_vcpus=1,
        used_memory_mib=100,
        local_pool_free_gib={"pool-x": 50, "pool-y": 5},
        anti_affinity_groups=frozenset({"web"}),
    )
    the_vm = vm(local_disks_gib={"pool-x": 20}, anti_affinity_group="db")
    after = reserve(before, the_vm, copy_local_disks=True)
    assert after.used_vcpus == 3
    assert after.used_memory_mib == 1124
    assert after.local_pool_free_gib == {"pool-x": 30, "pool-y": 5}
    assert after.anti_affinity_groups == {"web", "db"}
    # The original is untouched: views are values.
    assert before.used_vcpus == 1
    assert before.local_pool_free_gib == {"pool-x": 50, "pool-y": 5}


def test_reserve_without_copy_leaves_local_pools_alone() -> None:
    before = host("h", local_pool_free_gib={"pool-x": 50})
    after = reserve(before, vm(local_disks_gib={"pool-x": 20}), copy_local_disks=False)
    assert after.local_pool_free_gib == {"pool-x": 50}
    assert after.anti_affinity_groups == before.anti_affinity_groups


def test_reserve_refuses_to_copy_into_a_missing_pool() -> None:
    with pytest.raises(ValueError, match="host h has no local pool pool-x for VM vm1"):
        reserve(host("h"), vm(local_disks_gib={"pool-x": 1}), copy_local_disks=True)


def test_reserve_then_choose_sees_the_reservation() -> None:
    target = host("h", memory_mib=2048)
    target = reserve(target, vm("first"), copy_local_disks=False)
    assert choose_host(vm("second"), [target]).host == "h"
    target = reserve(target, vm("second"), copy_local_disks=False)
    assert choose_host(vm("third"), [target]).reasons == {"h": "not enough memory: 0 MiB free, 1024 needed"}


def test_views_are_immutable_and_copy_their_mappings() -> None:
    pools = {"pool-x": 10}
    view = host("h", local_pool_free_gib=pools)
    pools["pool-x"] = 0
    assert view.local_pool_free_gib == {"pool-x": 10}
    with pytest.raises(TypeError):
        view.local_pool_free_gib["pool-x"] = 1  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        view.name = "other"  # type: ignore[misc]


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="host h: used_memory_mib is -1"):
        host("h", used_memory_mib=-1)
    with pytest.raises(ValueError, match="VM v: memory_mib is -5"):
        VMView(name="v", cpu=1, memory_mib=-5)
    with pytest.raises(ValueError, match="VM v: pool-x is -1"):
        VMView(name="v", cpu=1, memory_mib=5, local_disks_gib={"pool-x": -1})


def test_explain() -> None:
    assert explain(Choice(host="b", reasons={})) == "host b"
    assert explain(Choice(host="b", reasons={"a": "disabled"})) == "host b (1 other host rejected)"
    assert explain(Choice(host="b", reasons={"a": "x", "c": "y"})) == "host b (2 other hosts rejected)"
    assert explain(Choice(host=None, reasons={})) == "no host: there are no hosts"
    assert (
        explain(Choice(host=None, reasons={"b": "disconnected", "a": "in Maintenance"}))
        == "no host: a: in Maintenance; b: disconnected"
    )


def one_vcpu(name: str) -> VMView:
    return vm(name, cpu=1, memory_mib=256, host=None)


@pytest.mark.parametrize(
    ("ratio", "fits"),
    [(1.0, 2), (1.5, 3), (4.0, 8), (0.5, 1)],
)
def test_a_2_core_host_takes_cores_times_the_cpu_allocation_ratio(ratio: float, fits: int) -> None:
    target = host("h", vcpus=2, memory_mib=65536, cpu_allocation_ratio=ratio)
    for n in range(fits):
        assert choose_host(one_vcpu(f"v{n}"), [target]).host == "h", f"guest {n + 1} of {fits}"
        target = reserve(target, one_vcpu(f"v{n}"), copy_local_disks=False)
    assert choose_host(one_vcpu("one-too-many"), [target]).reasons == {
        "h": "not enough vCPUs: 0 free, 1 needed"
    }


def test_memory_counts_with_its_own_ratio() -> None:
    target = host("h", vcpus=64, memory_mib=1024, memory_allocation_ratio=1.5)
    assert (target.allocatable_vcpus, target.allocatable_memory_mib) == (64, 1536)
    big = vm(cpu=1, memory_mib=1536, host=None)
    assert choose_host(big, [target]).host == "h"
    assert choose_host(big, [host("h", vcpus=64, memory_mib=1024)]).reasons == {
        "h": "not enough memory: 1024 MiB free, 1536 needed"
    }


@pytest.mark.parametrize(
    ("physical", "ratio", "expected"), [(2, 4.0, 8), (3, 1.1, 3), (10, 1.15, 11), (1, 0.5, 0), (7, 1.0, 7)]
)
def test_allocatable_rounds_down(physical: int, ratio: float, expected: int) -> None:
    assert allocatable(physical, ratio) == expected


BOTH = frozenset({C.LIVE_MIGRATION, C.BLOCK_MIGRATION})


@pytest.mark.parametrize(
    ("capabilities", "copy", "refusal"),
    [
        (BOTH, False, None),
        (BOTH, True, None),
        (frozenset({C.LIVE_MIGRATION}), False, None),
        (frozenset({C.LIVE_MIGRATION}), True, "its driver cannot migrate local disks (no block migration)"),
        (frozenset({C.BLOCK_MIGRATION}), False, "its driver cannot live-migrate"),
        (frozenset({C.MEMORY_SNAPSHOT, C.DISK_SNAPSHOT}), False, "its driver cannot live-migrate"),
        (frozenset(), True, "its driver cannot migrate local disks (no block migration)"),
    ],
)
def test_migration_needs_the_drivers_capability(
    capabilities: frozenset[C], copy: bool, refusal: str | None
) -> None:
    target = host("h", capabilities=capabilities, local_pool_free_gib={"pool-x": 50})
    the_vm = vm(local_disks_gib={"pool-x": 20} if copy else {})
    assert migration_refusal(target, copy) == refusal
    choice = choose_host(
        the_vm, [host("src", capabilities=BOTH), target], copy_local_disks=copy, migration=True
    )
    assert choice == (Choice("h", {}) if refusal is None else Choice(None, {"h": refusal}))
    # a start is no migration: capabilities do not matter there
    assert choose_host(replace(the_vm, host=None), [target]).host == "h"


def test_a_source_that_cannot_migrate_blocks_every_target() -> None:
    source = host("src", capabilities=frozenset({C.DISK_SNAPSHOT}))
    choice = choose_host(vm(), [source, host("t", capabilities=BOTH)], migration=True)
    assert choice == Choice(None, {}, blocked="host src: its driver cannot live-migrate")
    assert explain(choice) == "no host: the VM cannot leave host src: its driver cannot live-migrate"


_states = st.sampled_from(list(S))
_hosts = st.lists(
    st.builds(
        HostView,
        name=st.sampled_from(["h1", "h2", "h3", "h4", "h5"]),
        cluster=st.sampled_from(["c1", "c2"]),
        state=_states,
        connected=st.booleans(),
        vcpus=st.integers(1, 16),
        memory_mib=st.integers(512, 8192),
        used_vcpus=st.integers(0, 16),
        used_memory_mib=st.integers(0, 8192),
        shared_pools=st.frozensets(st.sampled_from(["pool-a", "pool-b"])),
        anti_affinity_groups=st.frozensets(st.sampled_from(["db", "web"])),
        networks=st.frozensets(st.sampled_from(["lan", "san"])),
    ),
    max_size=5,
    unique_by=lambda h: h.name,
)
_vms = st.builds(
    VMView,
    name=st.just("vm"),
    cpu=st.integers(1, 8),
    memory_mib=st.integers(64, 4096),
    host=st.sampled_from([None, "h1"]),
    shared_pools=st.frozensets(st.sampled_from(["pool-a", "pool-b"])),
    anti_affinity_group=st.sampled_from([None, "db"]),
    host_affinity=st.frozensets(st.sampled_from(["h1", "h2", "h3"])),
    cluster=st.sampled_from([None, "c1"]),
    networks=st.frozensets(st.sampled_from(["lan", "san"])),
)


@given(_vms, _hosts)
def test_chosen_host_always_fits_and_every_other_host_has_a_reason(
    the_vm: VMView, hosts: list[HostView]
) -> None:
    choice = choose_host(the_vm, hosts)
    names = {h.name for h in hosts}
    if choice.host is None:
        assert set(choice.reasons) == names
        return
    chosen = next(h for h in hosts if h.name == choice.host)
    assert chosen.state is S.ENABLED
    assert chosen.connected
    assert chosen.name != the_vm.host
    assert chosen.free_vcpus >= the_vm.cpu
    assert chosen.free_memory_mib >= the_vm.memory_mib
    assert the_vm.shared_pools <= chosen.shared_pools
    assert the_vm.networks <= chosen.networks
    assert the_vm.anti_affinity_group not in chosen.anti_affinity_groups
    assert not the_vm.host_affinity or chosen.name in the_vm.host_affinity
    assert the_vm.cluster in (None, chosen.cluster)
    fitting = names - set(choice.reasons)
    assert choice.host in fitting
    # Spread: no other fitting host has more free memory.
    assert all(chosen.free_memory_mib >= h.free_memory_mib for h in hosts if h.name in fitting)


def test_measured_cpu_use_ranks_hosts_before_free_memory_when_given() -> None:
    roomy, busy_small = host("roomy", memory_mib=65536), host("small")
    assert choose_host(vm(), [roomy, busy_small]).host == "roomy"  # allocation only: more free memory
    used = {"roomy": 0.71, "small": 0.12}
    assert choose_host(vm(), [roomy, busy_small], real_use=used).host == "small"
    # within a tenth: the same, and free memory decides again
    assert choose_host(vm(), [roomy, busy_small], real_use={"roomy": 0.14, "small": 0.11}).host == "roomy"
    # migrations in flight (load) still come first
    assert choose_host(vm(), [roomy, busy_small], real_use=used, load={"small": 1.0}).host == "roomy"
