"""Seeding a fleet straight into the store, before its server starts.

Creating 10,000 VMs through the API would measure the API (row 1 does that); the fleet
rows need the VMs to exist already. So the bench writes them through ``Store.create``
(the store's own write path: revisions, change rows, resource versions) into the data
directory the server then opens. Hosts are written as they were before a power outage:
Enabled and Up with their capacity; VMs Running on their host with the finalizer of a
defined domain. The simulator's state file starts empty: every domain is gone, which is
exactly what a power outage leaves behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from virtplane.domain.resources import (
    Capability,
    Capacity,
    Condition,
    ConditionStatus,
    Host,
    HostConnection,
    HostSpec,
    HostStatus,
    LiveMigrationPolicy,
    Metadata,
    Placement,
    PoolKind,
    Resource,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineSpec,
    VirtualMachineStatus,
    VMPhase,
)
from virtplane.store.store import Store, sqlite_url

CLUSTER = "bench"
DOMAIN_FINALIZER = "virtplane.io/domain"  # controllers.vm.steps.FINALIZER: a domain was defined
BEFORE = datetime.now(UTC) - timedelta(days=1)  # when the seeded VMs last became Running


def open_store(data_dir: Path, db_url: str | None = None) -> Store:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(db_url or sqlite_url(data_dir / "virtplane.db"))
    store.migrate()
    return store


def host(name: str, *, vcpus: int = 64, memory_mib: int = 262144) -> Host:
    capacity = Capacity(vcpus=vcpus, memory_mib=memory_mib)
    return Host(
        metadata=Metadata(name=name),
        spec=HostSpec(uri=f"sim://{name}", cluster=CLUSTER, capacity=capacity),
        status=HostStatus(
            connection=HostConnection.UP,
            capacity=capacity,
            capabilities=[Capability.LIVE_MIGRATION, Capability.BLOCK_MIGRATION],
        ),
    )


def shared_pool(name: str) -> StoragePool:
    return StoragePool(
        metadata=Metadata(name=name),
        spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster=CLUSTER, capacity_gib=1024 * 1024),
    )


def running_vm(
    name: str,
    on_host: str,
    *,
    run_policy: RunPolicy = RunPolicy.ALWAYS_ON,
    memory_mib: int = 256,
    labels: dict[str, str] | None = None,
    anti_affinity_group: str | None = None,
) -> VirtualMachine:
    """A VM that was Running on ``on_host`` (its domain there is gone until the server acts)."""
    return VirtualMachine(
        metadata=Metadata(name=name, labels=labels or {}, finalizers=[DOMAIN_FINALIZER]),
        spec=VirtualMachineSpec(
            run_policy=run_policy,
            cpu=1,
            memory_mib=memory_mib,
            live_migration_policy=LiveMigrationPolicy.ALLOWED,
            placement=Placement(anti_affinity_group=anti_affinity_group),
            termination_grace_period_s=5,
        ),
        status=VirtualMachineStatus(  # as the VM controller leaves a running VM
            phase=VMPhase.RUNNING,
            host=on_host,
            conditions=[
                Condition(
                    type="Ready",
                    status=ConditionStatus.TRUE,
                    reason="InSync",
                    message=f"run policy {run_policy.value}",
                    last_transition_time=BEFORE,
                ),
                Condition(
                    type="DisksReady",
                    status=ConditionStatus.TRUE,
                    reason="Ready",
                    last_transition_time=BEFORE,
                ),
            ],
            observed_generation=1,
            message=f"run policy {run_policy.value}",
        ),
    )


def fleet(hosts: int, vms: int, *, prefix: str = "vm") -> list[Resource]:
    """``hosts`` hosts and ``vms`` AlwaysOn VMs spread evenly over them (256 MiB, 1 vCPU)."""
    objects: list[Resource] = [host(f"h{i:04d}") for i in range(hosts)]
    objects += [
        running_vm(f"{prefix}-{i:05d}", f"h{i % hosts:04d}", labels={"group": f"g{i % 10}"})
        for i in range(vms)
    ]
    return objects


def seed(data_dir: Path, objects: Iterable[Resource], db_url: str | None = None) -> int:
    """Create ``objects`` in the store under ``data_dir`` (or at ``db_url``); returns how many."""
    store = open_store(data_dir, db_url)
    try:
        count = 0
        for obj in objects:
            store.create(obj)
            count += 1
        return count
    finally:
        store.close()
