"""An operation with nothing to wait for takes one look per step: its admission, then one for
each change of its VM (issue 13, row 4: every look runs on the one event loop the next step
waits for)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import Connection, event

from tests.conftest import eventually
from tests.controllers.helpers import add_host, add_vm, operate, wait_op, wait_phase
from tests.reconciles import reconcile_log
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.watch import reconciling
from virtplane.domain.intents import read_intents, read_migration
from virtplane.domain.resources import (
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VMPhase,
)
from virtplane.reconcile import Request
from virtplane.store.store import EventRecord, Store

OP = VirtualMachineOperation.KIND


async def test_an_operation_is_not_woken_by_its_own_writes(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "vm-1", RunPolicy.MANUAL)
    await wait_phase(plane, "vm-1", "Stopped")
    log = reconcile_log(plane)
    vm_writes: list[VMPhase] = []
    plane.cache.add_listener(
        lambda kind, name, old, new: (
            vm_writes.append(new.status.phase)  # type: ignore[union-attr]
            if kind == VirtualMachine.KIND and new is not None
            else None
        )
    )
    name = operate(plane, "vm-1", OperationType.START)
    assert (await wait_op(plane, name)).status.phase is OperationPhase.COMPLETED
    looks = len(log.finished[(OP, name)])
    # its creation, then at most one look per write of its VM (the intent, Starting, Running...)
    assert looks <= 1 + len(vm_writes), (looks, vm_writes)


async def test_a_migrate_begins_in_its_admission_look_with_the_vm_shown_migrating(
    plane: ControlPlane,
) -> None:
    add_host(plane, "h1")
    add_vm(plane, "vm-1", RunPolicy.ALWAYS_ON)
    await wait_phase(plane, "vm-1", "Running")
    add_host(plane, "h2")
    await eventually(lambda: plane.cache.host("h2") is not None)
    log = reconcile_log(plane)
    operation: list[str] = []  # its name, once created (before any look of it)
    # each write of the VM: its phase, a migration under way, and by which look of the operation
    # (how many had ended, if an operation's look wrote it)
    vm_writes: list[tuple[VMPhase, bool, int | None]] = []

    def record(kind: str, _: str, old: object, new: object) -> None:
        if isinstance(new, VirtualMachine):
            by_op = bool(operation) and reconciling.get() == Request(OP, operation[0])
            ended = len(log.finished[(OP, operation[0])]) if by_op else None
            vm_writes.append((new.status.phase, read_migration(new.metadata.annotations) is not None, ended))

    plane.cache.add_listener(record)
    name = operate(plane, "vm-1", OperationType.MIGRATE)
    operation.append(name)
    assert (await wait_op(plane, name)).status.phase is OperationPhase.COMPLETED
    # the intent is written Migrating, by the admission's look (none had ended): the move began
    # there; the VM's look after it has nothing to write
    assert [(phase, by) for phase, migrating, by in vm_writes if migrating] == [(VMPhase.MIGRATING, 0)], (
        vm_writes
    )
    # every later look was woken by a write of the VM
    looks = len(log.finished[(OP, name)])
    assert looks <= 1 + len(vm_writes), (looks, vm_writes)


async def test_an_operation_ends_with_its_events_in_one_transaction(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_host(plane)
    add_vm(plane, "vm-1", RunPolicy.MANUAL)
    await wait_phase(plane, "vm-1", "Stopped")
    on_their_own: list[EventRecord] = []  # events written without a write to ride on
    record_events = plane.store.record_events

    def spy(items: Sequence[EventRecord]) -> None:
        on_their_own.extend(items)
        record_events(items)

    monkeypatch.setattr(plane.store, "record_events", spy)
    name = operate(plane, "vm-1", OperationType.START)
    assert (await wait_op(plane, name)).status.phase is OperationPhase.COMPLETED
    reasons = {reason for _kind, _name, reason, _message, _type in on_their_own}
    assert not reasons & {"Completed", "OperationCompleted"}, on_their_own
    assert {"Completed", "OperationCompleted"} <= {e.reason for e in plane.store.list_events(limit=1000)}


async def test_an_admission_writes_the_intent_and_in_progress_in_one_transaction(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "vm-1", RunPolicy.MANUAL)
    await wait_phase(plane, "vm-1", "Stopped")
    committed: list[int] = []  # the highest revision in the file at each commit

    def on_commit(connection: Connection) -> None:
        cursor = connection.connection.cursor()
        cursor.execute("SELECT max(revision) FROM changes")
        committed.append(int(cursor.fetchone()[0] or 0))
        cursor.close()

    event.listen(plane.store.engine, "commit", on_commit)
    intent_at: list[int] = []  # revisions of the VM's writes that carry the start
    in_progress_at: list[int] = []  # revisions of the operation's writes that say InProgress

    def on_change(kind: str, name: str, old: object, new: object) -> None:
        if isinstance(new, VirtualMachine) and read_intents(new.metadata.annotations).start:
            intent_at.append(new.metadata.resource_version)
        if isinstance(new, VirtualMachineOperation) and new.status.phase is OperationPhase.IN_PROGRESS:
            in_progress_at.append(new.metadata.resource_version)

    plane.cache.add_listener(on_change)
    name = operate(plane, "vm-1", OperationType.START)
    assert (await wait_op(plane, name)).status.phase is OperationPhase.COMPLETED
    event.remove(plane.store.engine, "commit", on_commit)
    intent, in_progress = min(intent_at), min(in_progress_at)
    assert abs(in_progress - intent) == 1, (intent_at, in_progress_at)
    # no transaction ended between the two revisions
    assert not [r for r in committed if min(intent, in_progress) <= r < max(intent, in_progress)], committed


async def test_an_operation_waits_for_the_first_look_at_its_vm(store: Store) -> None:
    """A VM just created shows the phase it was created with (Pending) until its controller has
    looked at it: an operation sent right after the VM is not judged on that phase (a Start
    would be refused: "the VM is Pending"), it waits for that look's write, which wakes it."""
    plane = ControlPlane(store)  # not started: each look below is the test's own
    add_vm(plane, "vm-1", RunPolicy.MANUAL)
    name = operate(plane, "vm-1", OperationType.START)
    plane.cache.load()
    await plane.operations(Request(OP, name))
    assert store.get(VirtualMachineOperation, name).status.phase is OperationPhase.PENDING
    looked = store.get(VirtualMachine, "vm-1")
    looked.status.phase = VMPhase.STOPPED  # what the VM controller's first look writes (no host yet)
    await plane.ctx.write(looked)  # as that look writes it: the cache holds it at once
    await plane.operations(Request(OP, name))
    assert store.get(VirtualMachineOperation, name).status.phase is OperationPhase.IN_PROGRESS
