"""A cluster of simulated hosts with a shared pool and a local pool per host, migrating fast."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import eventually, make_plane
from virtplane.bootstrap import ControlPlane
from virtplane.domain.intents import read_intents, read_migration
from virtplane.domain.resources import (
    Capacity,
    Disk,
    Host,
    HostConnection,
    HostMaintenance,
    HostSpec,
    Metadata,
    PoolKind,
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
from virtplane.drivers.sim import MigrationTransition, SimCloud
from virtplane.store.store import Store

SHARED = "shared"


@dataclass
class Cluster:
    plane: ControlPlane
    sim: SimCloud

    @property
    def store(self) -> Store:
        return self.plane.store

    # ------------------------------------------------------------------ seeding

    async def add_host(self, name: str, vcpus: int = 16, memory_mib: int = 16384) -> None:
        self.store.create(
            Host(
                metadata=Metadata(name=name),
                spec=HostSpec(uri=f"sim://{name}", capacity=Capacity(vcpus=vcpus, memory_mib=memory_mib)),
            )
        )
        if self.store.find(StoragePool, SHARED) is None:
            self.store.create(
                StoragePool(
                    metadata=Metadata(name=SHARED),
                    spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster="default", capacity_gib=1000),
                )
            )
        self.store.create(
            StoragePool(
                metadata=Metadata(name=f"{name}-local"),
                spec=StoragePoolSpec(kind=PoolKind.LOCAL, host=name, driver_pool="local", capacity_gib=100),
            )
        )
        await eventually(lambda: self.host(name).status.connection is HostConnection.UP)
        await eventually(lambda: name in self.store.get(StoragePool, SHARED).status.reachable_hosts)
        await eventually(
            lambda: self.store.get(StoragePool, f"{name}-local").status.reachable_hosts == [name]
        )

    async def add_vm(
        self,
        name: str,
        *,
        pool: str = SHARED,
        memory_mib: int = 1024,
        cpu: int = 1,
        policy: RunPolicy = RunPolicy.ALWAYS_ON,
        running: bool = True,
        **spec: Any,
    ) -> VirtualMachine:
        self.store.create(
            Volume(metadata=Metadata(name=f"{name}-disk"), spec=VolumeSpec(pool=pool, size_gib=1))
        )
        await eventually(lambda: self.store.get(Volume, f"{name}-disk").status.phase is VolumePhase.READY)
        self.store.create(
            VirtualMachine(
                metadata=Metadata(name=name),
                spec=VirtualMachineSpec(
                    run_policy=policy,
                    cpu=cpu,
                    memory_mib=memory_mib,
                    disks=[Disk(volume=f"{name}-disk", boot_order=1)],
                    termination_grace_period_s=1,
                    **spec,
                ),
            )
        )
        await eventually(lambda: self.vm(name).status.phase is VMPhase.RUNNING)
        if not running:  # it ran on its host, then its policy stopped it there

            def off(vm: VirtualMachine) -> None:
                vm.spec.run_policy = RunPolicy.ALWAYS_OFF

            self.store.mutate(VirtualMachine, name, off)
            await eventually(lambda: self.vm(name).status.phase is VMPhase.STOPPED and not self.runs_on(name))
        return self.vm(name)

    # ------------------------------------------------------------------ reading

    def vm(self, name: str) -> VirtualMachine:
        return self.store.get(VirtualMachine, name)

    def host(self, name: str) -> Host:
        return self.store.get(Host, name)

    def state(self, host: str) -> str:
        return self.host(host).status.resource_state.value

    def maintenance(self, host: str) -> HostMaintenance:
        return self.store.get(HostMaintenance, host)

    def domain(self, vm: str) -> str:
        return domain_name(self.vm(vm).metadata.uid)

    def runs_on(self, vm: str) -> list[str]:
        """The hosts where the sim has the VM's domain live (running or migrating)."""
        return self.sim.snapshot_state().active_hosts(self.domain(vm))

    def settled(self, vm: str, host: str) -> bool:
        current = self.vm(vm)
        return (
            current.status.host == host
            and current.status.phase is VMPhase.RUNNING
            and read_migration(current.metadata.annotations) is None
            and self.runs_on(vm) == [host]
        )

    def held(self, vm: str) -> str | None:
        return read_intents(self.vm(vm).metadata.annotations).held_by

    def events(self, kind: str, name: str) -> list[str]:
        return [e.reason for e in self.store.list_events(kind=kind, name=name, limit=1000)]

    def fault(self, host: str, kind: str, vm: str | None = None, count: int = 1) -> None:
        self.sim.inject(host, kind, self.domain(vm) if vm else None, count)

    async def wait_state(self, host: str, state: str, timeout: float = 15.0) -> None:
        await eventually(lambda: self.state(host) == state, timeout=timeout)

    def request(self, host: str, strategy: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        from virtplane.domain.resources import MaintenanceStrategy

        service = self.plane.api_context.maintenance
        return service.request(  # type: ignore[no-any-return]
            host, MaintenanceStrategy(strategy) if strategy else None, dry_run, "test"
        )

    def cancel(self, host: str) -> dict[str, Any]:
        return self.plane.api_context.maintenance.cancel(host, "test")  # type: ignore[no-any-return]


@pytest.fixture
async def cluster(store: Store) -> AsyncIterator[Cluster]:
    """A running control plane on simulated hosts: 10 ms boots, a 1 GiB migration in ~0.1 s."""
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, time_scale=10.0, migration_tick_s=0.01)
    plane = make_plane(store, sim=sim)
    result = Cluster(plane, sim)
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    plane.settings.set("vm.start.backoff_cap_s", 0.2)
    await plane.start()
    yield result
    await plane.stop()


def most_at_once(record: list[MigrationTransition], key: Callable[[MigrationTransition], str]) -> int:
    """The most migrations in flight at one instant that share ``key`` (their source, their
    target, or anything for the cluster), over the simulator's complete, ordered record."""
    in_flight: Counter[str] = Counter()
    most = 0
    for transition in record:
        in_flight[key(transition)] += 1 if transition.started else -1
        most = max(most, in_flight[key(transition)])
    assert not any(in_flight.values()), f"each migration that started has ended, once: {in_flight}"
    return most
