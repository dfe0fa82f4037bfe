"""Random admin events, VM starts, stops and drains against a small reference model.

The machine keeps the fleet the way a controller would (host states, which VM
runs where) and drives it only through the domain functions: ``next_state``,
``choose_host``, ``plan_maintenance``. Alongside, a reference model written
independently of ``TRANSITIONS`` predicts each host's state and which hosts
may take a VM. After every step: no host is over capacity, no anti-affinity
group shares a host, a host in Maintenance runs nothing, and every host is in
the state the reference predicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from virtplane.domain.host_states import HostEvent, InvalidTransition, next_state
from virtplane.domain.maintenance_plan import PlanAction, PlanVM, Strategy, plan_maintenance
from virtplane.domain.placement import HostView, VMView, choose_host
from virtplane.domain.resources import HostResourceState as S

HOSTS = ("h1", "h2", "h3")
VCPUS = 4
MEMORY_MIB = 4096
LOCAL_POOL_GIB = 30
MAINTENANCE = {
    S.PREPARE_FOR_MAINTENANCE,
    S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
    S.MAINTENANCE,
    S.ERROR_IN_MAINTENANCE,
}


def reference_next(state: S, event: HostEvent) -> S | None:
    """DESIGN.md §5.1 restated event by event; None where the event is refused."""
    maintenance = state in MAINTENANCE
    if event is HostEvent.CANCEL:
        return S.ENABLED if maintenance else None
    if event is HostEvent.ENABLE:
        return None if maintenance else S.ENABLED
    if event is HostEvent.DISABLE:
        return None if maintenance else S.DISABLED
    if event is HostEvent.ASK_MAINTENANCE:
        if state in (S.ENABLED, S.ERROR_IN_MAINTENANCE):
            return S.PREPARE_FOR_MAINTENANCE
        return state if maintenance else None  # already asked: nothing changes
    if event is HostEvent.DRAINED:
        return S.MAINTENANCE if state in (S.PREPARE_FOR_MAINTENANCE, S.MAINTENANCE) else None
    if event is HostEvent.MIGRATION_FAILED_RETRYABLE:
        ok = state in (S.PREPARE_FOR_MAINTENANCE, S.ERROR_IN_PREPARE_FOR_MAINTENANCE)
        return S.ERROR_IN_PREPARE_FOR_MAINTENANCE if ok else None
    if event is HostEvent.BLOCKED:
        return S.ERROR_IN_MAINTENANCE if maintenance and state is not S.MAINTENANCE else None
    if event is HostEvent.ERRORS_CORRECTED:
        ok = state in (S.PREPARE_FOR_MAINTENANCE, S.ERROR_IN_PREPARE_FOR_MAINTENANCE)
        return S.PREPARE_FOR_MAINTENANCE if ok else None
    raise AssertionError(f"unknown event {event}")


@dataclass
class FleetVM:
    name: str
    cpu: int
    memory_mib: int
    group: str | None
    local_gib: int
    migratable: bool
    host: str | None = None  # None: stopped
    disk_host: str | None = None  # where its local disks are, once it has been placed

    def view(self, *, pinned_to_disks: bool = False) -> VMView:
        # Every host has a local pool called "local", so placement can't tell which one holds
        # the disks: a start that doesn't copy them pins the VM there, as a controller must.
        affinity = frozenset({self.disk_host}) if pinned_to_disks and self.disk_host else frozenset()
        return VMView(
            name=self.name,
            cpu=self.cpu,
            memory_mib=self.memory_mib,
            host=self.host,
            shared_pools=frozenset({"pool-a"}),
            local_disks_gib={"local": self.local_gib} if self.local_gib else {},
            anti_affinity_group=self.group,
            host_affinity=affinity,
        )


# cpu, memory_mib, anti-affinity group, GiB of local disk, migratable
_vm_params = st.tuples(
    st.integers(1, 2),
    st.sampled_from([512, 1024, 2048]),
    st.sampled_from([None, None, "db", "web"]),
    st.sampled_from([0, 0, 10]),
    st.booleans(),
)


class FleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, S] = {}
        self.predicted: dict[str, S] = {}
        self.connected: dict[str, bool] = {}
        self.vms: dict[str, FleetVM] = {}

    @initialize(vms=st.lists(_vm_params, min_size=2, max_size=8))
    def fleet(self, vms: list[tuple[int, int, str | None, int, bool]]) -> None:
        for name in HOSTS:
            self.states[name] = self.predicted[name] = S.ENABLED
            self.connected[name] = True
        # Start with VMs running, so drains have something to move.
        for params in vms:
            self.create_vm(*params)

    # ---------------------------------------------------------------- views of the fleet

    def running_on(self, host: str) -> list[FleetVM]:
        return [vm for vm in self.vms.values() if vm.host == host]

    def local_gib_on(self, host: str) -> int:
        # Local disks take room whether their VM runs or not.
        return sum(vm.local_gib for vm in self.vms.values() if vm.disk_host == host)

    def view(self, host: str) -> HostView:
        running = self.running_on(host)
        return HostView(
            name=host,
            cluster="c1",
            state=self.states[host],
            connected=self.connected[host],
            vcpus=VCPUS,
            memory_mib=MEMORY_MIB,
            used_vcpus=sum(vm.cpu for vm in running),
            used_memory_mib=sum(vm.memory_mib for vm in running),
            shared_pools=frozenset({"pool-a"}),
            local_pool_free_gib={"local": LOCAL_POOL_GIB - self.local_gib_on(host)},
            anti_affinity_groups=frozenset(vm.group for vm in running if vm.group),
        )

    def reference_fits(self, vm: FleetVM, host: str, copy_local_disks: bool) -> bool:
        running = self.running_on(host)
        return (
            self.predicted[host] is S.ENABLED
            and self.connected[host]
            and host != vm.host
            and sum(v.cpu for v in running) + vm.cpu <= VCPUS
            and sum(v.memory_mib for v in running) + vm.memory_mib <= MEMORY_MIB
            and (not copy_local_disks or self.local_gib_on(host) + vm.local_gib <= LOCAL_POOL_GIB)
            and (copy_local_disks or vm.disk_host in (None, host))
            and (vm.group is None or all(v.group != vm.group for v in running))
        )

    def apply(self, host: str, event: HostEvent) -> None:
        expected = reference_next(self.predicted[host], event)
        try:
            actual = next_state(self.states[host], event)
        except InvalidTransition:
            assert expected is None, f"{self.predicted[host]} + {event} should give {expected}"
            return
        assert actual is expected
        self.states[host] = actual
        self.predicted[host] = expected

    def start(self, vm: FleetVM) -> None:
        # A first start creates the local disks, which needs room just like copying them.
        create_disks = bool(vm.local_gib) and vm.disk_host is None
        choice = choose_host(
            vm.view(pinned_to_disks=True), [self.view(h) for h in HOSTS], copy_local_disks=create_disks
        )
        fitting = [h for h in HOSTS if self.reference_fits(vm, h, copy_local_disks=create_disks)]
        if choice.host is None:
            assert not fitting, f"{vm} fits on {fitting} but: {choice.reasons}"
            return
        assert choice.host in fitting
        most_free = max(MEMORY_MIB - sum(v.memory_mib for v in self.running_on(h)) for h in fitting)
        assert self.view(choice.host).free_memory_mib == most_free
        vm.host = choice.host
        if create_disks:
            vm.disk_host = choice.host

    # ---------------------------------------------------------------- rules

    @rule(host=st.sampled_from(HOSTS))
    def ask_maintenance(self, host: str) -> None:
        # A rule of its own, not one of the admin events, so drains come up often.
        self.apply(host, HostEvent.ASK_MAINTENANCE)

    @rule(
        host=st.sampled_from(HOSTS),
        event=st.sampled_from([HostEvent.DISABLE, HostEvent.ENABLE, HostEvent.CANCEL]),
    )
    def admin(self, host: str, event: HostEvent) -> None:
        self.apply(host, event)

    @rule(
        host=st.sampled_from(HOSTS),
        event=st.sampled_from(
            [HostEvent.MIGRATION_FAILED_RETRYABLE, HostEvent.ERRORS_CORRECTED, HostEvent.BLOCKED]
        ),
    )
    def drain_trouble(self, host: str, event: HostEvent) -> None:
        self.apply(host, event)

    @rule(host=st.sampled_from(HOSTS), connected=st.booleans())
    def connection(self, host: str, connected: bool) -> None:
        self.connected[host] = connected

    @precondition(lambda self: len(self.vms) < 14)
    @rule(params=_vm_params)
    def new_vm(self, params: tuple[int, int, str | None, int, bool]) -> None:
        self.create_vm(*params)

    def create_vm(
        self, cpu: int, memory_mib: int, group: str | None, local_gib: int, migratable: bool
    ) -> None:
        vm = FleetVM(f"vm{len(self.vms)}", cpu, memory_mib, group, local_gib, migratable)
        self.vms[vm.name] = vm
        self.start(vm)

    @precondition(lambda self: any(vm.host is None for vm in self.vms.values()))
    @rule(data=st.data())
    def start_stopped_vm(self, data: st.DataObject) -> None:
        stopped = sorted(name for name, vm in self.vms.items() if vm.host is None)
        self.start(self.vms[data.draw(st.sampled_from(stopped))])

    @precondition(lambda self: any(vm.host is not None for vm in self.vms.values()))
    @rule(data=st.data())
    def stop_vm(self, data: st.DataObject) -> None:
        running = sorted(name for name, vm in self.vms.items() if vm.host is not None)
        self.vms[data.draw(st.sampled_from(running))].host = None

    @precondition(lambda self: S.PREPARE_FOR_MAINTENANCE in self.states.values())
    @rule(data=st.data(), strategy=st.sampled_from(list(Strategy)))
    def drain(self, data: st.DataObject, strategy: Strategy) -> None:
        preparing = sorted(h for h, s in self.states.items() if s is S.PREPARE_FOR_MAINTENANCE)
        host = data.draw(st.sampled_from(preparing))
        on_host = self.running_on(host)
        planned = [
            PlanVM(vm=vm.view(), running=True, has_local_disks=bool(vm.local_gib), migratable=vm.migratable)
            for vm in on_host
        ]
        plan = plan_maintenance(host, planned, [self.view(h) for h in HOSTS], strategy)
        # Check every move against the fleet before any of them happens, as the plan promised.
        before = {h: list(self.running_on(h)) for h in HOSTS}
        for item in plan.items:
            vm = self.vms[item.vm]
            if item.action in (PlanAction.MIGRATE, PlanAction.MIGRATE_WITH_STORAGE):
                assert item.target is not None and item.target != host
                assert self.states[item.target] is S.ENABLED and self.connected[item.target]
                copy = item.action is PlanAction.MIGRATE_WITH_STORAGE
                assert copy is bool(vm.local_gib)
                vm.host = item.target
                if copy:
                    vm.disk_host = item.target
            elif item.action in (PlanAction.STOP, PlanAction.FORCE_STOP):
                assert strategy in (Strategy.STOP, Strategy.FORCE_STOP)
                vm.host = None
            else:
                assert item.action is PlanAction.BLOCKED
        assert before[host] == on_host
        remaining = self.running_on(host)
        assert {vm.name for vm in remaining} == {item.vm for item in plan.blocked}
        self.apply(host, HostEvent.DRAINED if plan.feasible else HostEvent.BLOCKED)

    # ---------------------------------------------------------------- invariants

    @invariant()
    def states_match_the_reference(self) -> None:
        assert self.states == self.predicted

    @invariant()
    def capacity_is_never_exceeded(self) -> None:
        for host in HOSTS:
            running = self.running_on(host)
            assert sum(vm.cpu for vm in running) <= VCPUS
            assert sum(vm.memory_mib for vm in running) <= MEMORY_MIB
            assert self.local_gib_on(host) <= LOCAL_POOL_GIB

    @invariant()
    def anti_affinity_is_never_violated(self) -> None:
        for host in HOSTS:
            groups = [vm.group for vm in self.running_on(host) if vm.group]
            assert len(groups) == len(set(groups))

    @invariant()
    def a_host_in_maintenance_runs_nothing(self) -> None:
        for host in HOSTS:
            if self.states[host] is S.MAINTENANCE:
                assert not self.running_on(host)


FleetMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestFleet = FleetMachine.TestCase
