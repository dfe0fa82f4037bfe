"""The cache reads again only what it does not hold yet (issue 13: every controller write
was read back from the store when the feed delivered it, though ``put`` had it already)."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

import pytest

from virtplane.bootstrap import ControlPlane
from virtplane.controllers.context import Removal
from virtplane.controllers.vm.reconciler import VMReconciler
from virtplane.domain.intents import MigrationIntent, read_intents, write_intents, write_migration
from virtplane.domain.resources import (
    Metadata,
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumeSpec,
)
from virtplane.reconcile import Request
from virtplane.runtime.cache import Cache
from virtplane.store.changes import Change
from virtplane.store.store import Store


@pytest.fixture
def counted_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The names of every ``get_many`` the store answers."""
    reads: list[list[str]] = []
    get_many = store.get_many

    def counting(cls: Any, names: Any) -> Any:
        reads.append(list(names))
        return get_many(cls, names)

    monkeypatch.setattr(store, "get_many", counting)
    return reads


def _vm(name: str) -> VirtualMachine:
    return VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))


def test_a_change_the_cache_took_in_is_not_read_again(store: Store, counted_reads: list[list[str]]) -> None:
    cache = Cache(store)
    seen: list[tuple[str, VMPhase | None]] = []
    cache.add_listener(lambda kind, name, old, new: seen.append((name, new.status.phase if new else None)))  # type: ignore[union-attr]
    since = store.revision()
    vm = store.create(_vm("vm-1"))
    vm.status.phase = VMPhase.STOPPED
    cache.put(store.update_status(vm))  # a controller's write: in the cache at once
    seen.clear()

    cache.apply(store.changes_since(since))

    assert counted_reads == []  # both changes are at or below the version the cache holds
    assert seen == []
    held = cache.vm("vm-1")
    assert held is not None and held.status.phase is VMPhase.STOPPED


def test_what_the_cache_does_not_hold_is_read_and_a_deletion_applied(
    store: Store, counted_reads: list[list[str]]
) -> None:
    cache = Cache(store)
    since = store.revision()
    vm = store.create(_vm("vm-1"))
    cache.put(vm)
    vm.status.phase = VMPhase.STOPPED
    store.update_status(vm)  # another writer (the API, another replica): not in the cache yet
    store.create(_vm("vm-2"))
    cache.put(store.create(_vm("vm-3")))
    store.delete(VirtualMachine, "vm-3")

    cache.apply(store.changes_since(since))

    assert counted_reads == [["vm-1", "vm-2"]]
    held = cache.vm("vm-1")
    assert held is not None and held.status.phase is VMPhase.STOPPED
    assert cache.vm("vm-2") is not None
    assert cache.vm("vm-3") is None


def _op(name: str, version: int, phase: OperationPhase) -> VirtualMachineOperation:
    op = VirtualMachineOperation(
        metadata=Metadata(name=name, resource_version=version),
        spec=VirtualMachineOperationSpec(vm="vm-1", type=OperationType.MIGRATE),
    )
    op.status.phase = phase
    return op


def test_the_operations_under_way_are_the_unfinished_ones(store: Store) -> None:
    """What a freed migration slot wakes (every Migrate or Evict under way) is read from this
    index, not from every VM's operations (a fleet's worth at each migration's end)."""
    cache = Cache(store)
    steps: list[tuple[VirtualMachineOperation | str, set[str]]] = [
        (_op("a", 1, OperationPhase.PENDING), {"a"}),
        (_op("b", 2, OperationPhase.IN_PROGRESS), {"a", "b"}),
        (_op("a", 3, OperationPhase.COMPLETED), {"b"}),
        (_op("c", 4, OperationPhase.FAILED), {"b"}),
        ("b", set()),  # deleted while under way
    ]
    for revision, (step, expected) in enumerate(steps, start=10):
        if isinstance(step, str):
            cache.apply(
                [Change(revision=revision, kind=VirtualMachineOperation.KIND, name=step, op="deleted")]
            )
        else:
            cache.put(step)
        assert {op.metadata.name for op in cache.operations_under_way()} == expected


def test_the_migrating_vms_are_the_ones_with_a_migration_intent(store: Store) -> None:
    """The migration slots, the targets' room and the drains count the migrations in flight from
    this index, not from every VM of the fleet (at each Migrate's begin and each drain's look)."""
    cache = Cache(store)
    intent = MigrationIntent(
        source="h1", target="h2", attempt=1, requested_by="operation/m", started_at=datetime.now(UTC)
    )

    def vm(name: str, revision: int, migrating: bool) -> VirtualMachine:
        found = VirtualMachine(metadata=Metadata(name=name, uid=f"uid-{name}", resource_version=revision))
        found.metadata.annotations = write_migration({}, intent if migrating else None)
        return found

    steps: list[tuple[VirtualMachine | str, list[str]]] = [
        (vm("a", 1, migrating=False), []),
        (vm("a", 2, migrating=True), ["a"]),
        (vm("b", 3, migrating=True), ["a", "b"]),
        (vm("a", 4, migrating=False), ["b"]),  # arrived: the intent is cleared
        ("b", []),  # deleted while migrating
    ]
    for revision, (step, expected) in enumerate(steps, start=10):
        if isinstance(step, str):
            cache.apply([Change(revision=revision, kind=VirtualMachine.KIND, name=step, op="deleted")])
        else:
            cache.put(step)
        assert [found.metadata.name for found in cache.migrating_vms()] == expected


def test_each_pools_used_space_is_the_sum_of_its_volumes_sizes(store: Store) -> None:
    """Placement (every host view) and the pool controller read this tally instead of summing
    every volume of the fleet at each look."""
    cache = Cache(store)

    def volume(name: str, revision: int, pool: str, size_gib: int) -> Volume:
        return Volume(
            metadata=Metadata(name=name, resource_version=revision),
            spec=VolumeSpec(pool=pool, size_gib=size_gib),
        )

    steps: list[Volume | str] = [
        volume("a", 1, "p", 10),
        volume("b", 2, "p", 5),
        volume("a", 3, "p", 20),  # grown
        volume("b", 4, "q", 5),  # moved with a block migration: to the target's pool
        "a",  # deleted
    ]
    for revision, step in enumerate(steps, start=10):
        if isinstance(step, str):
            cache.apply([Change(revision=revision, kind=Volume.KIND, name=step, op="deleted")])
        else:
            cache.put(step)
        summed = {pool: sum(v.spec.size_gib for v in cache.volumes() if v.spec.pool == pool) for pool in "pq"}
        assert {pool: cache.pool_used_gib(pool) for pool in "pq"} == summed


def test_a_reconcile_starts_from_the_caches_object_else_the_stores(store: Store) -> None:
    """No store read for an object the cache holds (``ctx.read``: the cache's own, to read; a
    copy to change with ``to_change``); an object the cache does not hold yet is read from the
    store."""
    ctx = ControlPlane(store).ctx  # not started: the cache holds what the test puts in
    held = store.create(_vm("vm-1"))
    ctx.cache.put(held)
    store.create(_vm("vm-2"))

    assert ctx.read(VirtualMachine, "vm-1") is held
    to_change = ctx.read(VirtualMachine, "vm-1", to_change=True)
    assert to_change is not held and to_change == held, "a copy: changing it leaves the cache's alone"
    from_store = ctx.read(VirtualMachine, "vm-2")
    assert from_store is not None and from_store.metadata.name == "vm-2"
    assert ctx.read(VirtualMachine, "vm-3") is None


async def test_an_object_a_controller_deletes_leaves_the_cache_at_once(store: Store) -> None:
    """The feed delivers a deletion later; a look before that must not find the object (the VM
    controller would delete it again, and record its Deleted event twice)."""
    ctx = ControlPlane(store).ctx
    ctx.cache.put(store.create(_vm("vm-1")))
    seen: list[tuple[str, object]] = []
    ctx.cache.add_listener(lambda kind, name, old, new: seen.append((name, new)))

    await ctx.write(Removal(VirtualMachine, "vm-1"))

    assert ctx.cache.vm("vm-1") is None and ctx.read(VirtualMachine, "vm-1") is None
    assert seen == [("vm-1", None)]  # the watches see the deletion as from the feed


async def test_a_vm_look_changes_nothing_the_cache_holds(store: Store) -> None:
    """The VM controller starts from the cache's own object, uncopied (``ctx.held``): its steps
    change the state's copies (status, intents, finalizers), never that object."""
    ctx = ControlPlane(store).ctx
    held = store.create(_vm("vm-1"))
    ctx.cache.put(held)
    before = held.model_dump()

    await VMReconciler(ctx)(Request(VirtualMachine.KIND, "vm-1"))

    assert store.get(VirtualMachine, "vm-1").status != held.status  # the look wrote what it saw
    assert held.model_dump() == before


async def test_an_operation_look_changes_nothing_the_cache_holds(store: Store) -> None:
    """The operation controller starts from the cache's own operation and VM, uncopied
    (``ctx.held``), and changes copies only: its admission (the VM's intent, InProgress) and
    its end (Completed)."""
    plane = ControlPlane(store)
    ctx = plane.ctx
    vm = store.create(_vm("vm-1"))
    vm.status.phase = VMPhase.STOPPED
    ctx.cache.put(store.update_status(vm))
    op = VirtualMachineOperation(
        metadata=Metadata(name="op-1"), spec=VirtualMachineOperationSpec(vm="vm-1", type=OperationType.START)
    )
    ctx.cache.put(store.create(op))

    def held() -> list[Any]:
        return [ctx.cache.get(VirtualMachine, "vm-1"), ctx.cache.get(VirtualMachineOperation, "op-1")]

    before = held()
    dumps = [o.model_dump() for o in before]
    await plane.operations(Request(VirtualMachineOperation.KIND, "op-1"))
    assert store.get(VirtualMachineOperation, "op-1").status.phase is OperationPhase.IN_PROGRESS
    assert read_intents(store.get(VirtualMachine, "vm-1").metadata.annotations).start
    assert [o.model_dump() for o in before] == dumps

    started = store.get(VirtualMachine, "vm-1")  # as the VM controller leaves it once running
    intents = read_intents(started.metadata.annotations).with_(start=False)
    started.metadata.annotations = write_intents(started.metadata.annotations, intents)
    started.status.phase = VMPhase.RUNNING
    ctx.cache.put(store.update_status(started))
    before = held()
    dumps = [o.model_dump() for o in before]
    await plane.operations(Request(VirtualMachineOperation.KIND, "op-1"))
    assert store.get(VirtualMachineOperation, "op-1").status.phase is OperationPhase.COMPLETED
    assert [o.model_dump() for o in before] == dumps


def test_a_load_runs_without_the_cycle_collector_and_gives_it_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything a load makes lives on: no collection walks it again meanwhile; the collector
    is on again after the load, also after one that failed."""
    store.create(_vm("vm-1"))
    cache = Cache(store)
    seen: list[bool] = []
    list_objects = store.list_objects

    def listing(cls: Any) -> Any:
        seen.append(gc.isenabled())
        return list_objects(cls)

    monkeypatch.setattr(store, "list_objects", listing)
    assert gc.isenabled()
    cache.load()
    assert seen and not any(seen) and gc.isenabled()
    assert cache.vm("vm-1") is not None

    def failing(cls: Any) -> Any:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(store, "list_objects", failing)
    with pytest.raises(RuntimeError):
        Cache(store).load()
    assert gc.isenabled()
