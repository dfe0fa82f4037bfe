"""Two control-plane replicas on one PostgreSQL database: only the lease holder reconciles."""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from tests.postgres.pg import schema_url
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import (
    Capacity,
    Host,
    HostSpec,
    Metadata,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
)
from virtplane.drivers.sim import SimCloud
from virtplane.server import sim_factory
from virtplane.store.store import Store

pytestmark = pytest.mark.postgres


def replica(store: Store, sim: SimCloud, name: str) -> ControlPlane:
    ref: list[ControlPlane] = []
    plane = ControlPlane(
        store,
        sim=sim,
        driver_factory=sim_factory(ref, sim),
        options=ControlPlaneOptions(workers=2, replica_id=name, lease_s=1.5, renew_every_s=0.3),
    )
    ref.append(plane)
    return plane


def add_vm(store: Store, name: str) -> None:
    store.create(
        VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(run_policy=RunPolicy.ALWAYS_ON))
    )


def phase(store: Store, name: str) -> str:
    return store.get(VirtualMachine, name).status.phase.value


async def test_only_the_lease_holder_reconciles_and_the_other_takes_over() -> None:
    with schema_url() as url:
        first_store, second_store = Store(url), Store(url)
        first_store.migrate()
        sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02)  # the hosts both replicas reach
        first, second = replica(first_store, sim, "replica-1"), replica(second_store, sim, "replica-2")
        assert first.elector is not None and second.elector is not None, "on by default with PostgreSQL"
        try:
            await first.start()
            await eventually(lambda: first.elector is not None and first.elector.is_leader)
            await second.start()
            first_store.create(
                Host(
                    metadata=Metadata(name="h1"),
                    spec=HostSpec(uri="sim://h1", capacity=Capacity(vcpus=8, memory_mib=8192)),
                )
            )
            add_vm(first_store, "a")
            await eventually(lambda: phase(first_store, "a") == "Running")
            assert not second.elector.is_leader and second.controllers == {}, (
                "the follower runs no controller"
            )
            await first.stop()  # releases the lease at once
            await eventually(lambda: second.elector is not None and second.elector.is_leader, timeout=10)
            add_vm(second_store, "b")
            await eventually(lambda: phase(second_store, "b") == "Running")
            assert phase(second_store, "a") == "Running"
        finally:
            await second.stop()
            await first.stop()
            first_store.close()
            second_store.close()
