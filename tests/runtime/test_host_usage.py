"""The cache's per-host usage (``Cache.usage``) always equals what summing the VMs gives.

Placement and the host controller read it instead of summing every VM of every host per look
(at 10,000 VMs on 500 hosts, one placement summed for 56 ms). Whatever sequence of writes and
deletions the VMs see, in any order of host, phase, size and anti-affinity group, the tally is
the sum the old code computed: PLACED_PHASES for placement, ALLOCATED_PHASES for the host.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from virtplane.domain.phases import ALLOCATED_PHASES, PLACED_PHASES
from virtplane.domain.resources import (
    Metadata,
    Placement,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.runtime.cache import Cache
from virtplane.store.changes import Change
from virtplane.store.store import Store

HOSTS = ["h1", "h2", "h3"]
NAMES = ["a", "b", "c", "d"]

write = st.fixed_dictionaries(
    {
        "name": st.sampled_from(NAMES),
        "host": st.sampled_from([None, *HOSTS]),
        "phase": st.sampled_from(list(VMPhase)),
        "cpu": st.integers(1, 4),
        "memory_mib": st.sampled_from([128, 512, 2048]),
        "group": st.sampled_from([None, "web", "db"]),
        "delete": st.booleans(),
    }
)


def summed(cache: Cache, host: str) -> tuple[int, int, int, int, int, frozenset[str]]:
    """The usage as the host controller and placement used to compute it, VM by VM."""
    vms = cache.vms_on_host(host)
    placed = [vm for vm in vms if vm.status.phase in PLACED_PHASES]
    allocated = [vm for vm in vms if vm.status.phase in ALLOCATED_PHASES]
    return (
        sum(vm.spec.cpu for vm in placed),
        sum(vm.spec.memory_mib for vm in placed),
        sum(vm.spec.cpu for vm in allocated),
        sum(vm.spec.memory_mib for vm in allocated),
        len(allocated),
        frozenset(g for vm in placed if (g := vm.spec.placement.anti_affinity_group)),
    )


def tallied(cache: Cache, host: str) -> tuple[int, int, int, int, int, frozenset[str]]:
    u = cache.usage(host)
    return (
        u.placed_vcpus,
        u.placed_memory_mib,
        u.allocated_vcpus,
        u.allocated_memory_mib,
        u.allocated_vms,
        u.anti_affinity_groups(),
    )


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(writes=st.lists(write, max_size=30))
def test_the_usage_of_each_host_is_the_sum_of_its_vms(store: Store, writes: list[dict[str, object]]) -> None:
    cache = Cache(store)  # only deletions reach it through apply, and those read nothing
    version: Counter[str] = Counter()
    for w in writes:
        name = str(w["name"])
        version[name] += 1
        if w["delete"]:
            cache.apply(
                [Change(revision=sum(version.values()), kind="VirtualMachine", name=name, op="deleted")]
            )
        else:
            vm = VirtualMachine(
                metadata=Metadata(name=name, resource_version=version[name]),
                spec=VirtualMachineSpec(
                    run_policy=RunPolicy.MANUAL,
                    cpu=w["cpu"],
                    memory_mib=w["memory_mib"],
                    placement=Placement(anti_affinity_group=w["group"]),
                ),
            )
            vm.status.host, vm.status.phase = w["host"], w["phase"]  # type: ignore[assignment]
            cache.put(vm)
        for host in HOSTS:
            assert tallied(cache, host) == summed(cache, host), (host, w)
