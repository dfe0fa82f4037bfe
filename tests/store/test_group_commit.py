"""The controllers' status writes, committed together (``GroupCommit``; SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextvars

import pytest
import sqlalchemy

from virtplane.domain.resources import (
    EventType,
    Metadata,
    Resource,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.store.errors import Conflict
from virtplane.store.group_commit import GroupCommit
from virtplane.store.store import Store
from virtplane.store.writes import StatusWrite

writer: contextvars.ContextVar[str] = contextvars.ContextVar("writer", default="")


def vms(store: Store, names: str) -> list[VirtualMachine]:
    spec = VirtualMachineSpec()
    return [store.create(VirtualMachine(metadata=Metadata(name=n), spec=spec)) for n in names]


def running(vm: VirtualMachine) -> StatusWrite:
    vm.status.phase = VMPhase.RUNNING
    return StatusWrite([vm], [("VirtualMachine", vm.metadata.name, "Started", "m", EventType.NORMAL)])


async def test_the_writes_of_one_turn_of_the_loop_are_one_commit(store: Store) -> None:
    a, b, c = vms(store, "abc")
    stale = store.get(VirtualMachine, "b")
    fresh = store.get(VirtualMachine, "b")
    fresh.status.message = "written meanwhile"
    store.update_status(fresh)
    commits: list[int] = []
    sqlalchemy.event.listen(store.engine, "commit", lambda _: commits.append(1))
    seen: list[tuple[str, str]] = []  # (the writer's context, the object) as each is committed
    group = GroupCommit(store, committed=lambda obj: seen.append((writer.get(), obj.metadata.name)))

    async def write(name: str, vm: VirtualMachine) -> list[Resource]:
        writer.set(name)
        return await group.write(running(vm))

    first, lost, third = await asyncio.gather(
        write("one", a), write("two", stale), write("three", c), return_exceptions=True
    )
    assert commits == [1]
    assert isinstance(lost, Conflict), "a lost race is its own writer's outcome"
    assert isinstance(first, list) and isinstance(third, list)
    # durable when the await returns; each committed object seen in its own writer's context
    assert store.get(VirtualMachine, "a") == first[0] and first[0].status.phase is VMPhase.RUNNING
    assert store.get(VirtualMachine, "c") == third[0]
    assert seen == [("one", "a"), ("three", "c")]
    assert [e.name for e in store.list_events(kind="VirtualMachine")] == ["a", "c"]
    del b


async def test_a_write_alone_is_committed_on_the_next_turn(store: Store) -> None:
    (a,) = vms(store, "a")
    group = GroupCommit(store, committed=lambda obj: None)
    [written] = await asyncio.wait_for(group.write(running(a)), timeout=5)
    assert store.get(VirtualMachine, "a") == written


async def test_a_writer_cancelled_before_the_commit_writes_nothing(store: Store) -> None:
    a, b = vms(store, "ab")
    group = GroupCommit(store, committed=lambda obj: None)
    cancelled = asyncio.ensure_future(group.write(running(a)))
    kept = asyncio.ensure_future(group.write(running(b)))
    await asyncio.sleep(0)  # both queued; the commit is the next turn's
    cancelled.cancel()
    await asyncio.wait_for(kept, timeout=5)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert store.get(VirtualMachine, "a").status.phase is not VMPhase.RUNNING
    assert store.get(VirtualMachine, "b").status.phase is VMPhase.RUNNING


async def test_a_failed_commit_is_every_writers_error(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = vms(store, "ab")
    group = GroupCommit(store, committed=lambda obj: None)

    def fails(_: object) -> None:
        raise sqlalchemy.exc.OperationalError("COMMIT", {}, Exception("disk I/O error"))

    monkeypatch.setattr(store, "write_each", fails)
    outcomes = await asyncio.gather(group.write(running(a)), group.write(running(b)), return_exceptions=True)
    assert [type(o) for o in outcomes] == [sqlalchemy.exc.OperationalError] * 2
