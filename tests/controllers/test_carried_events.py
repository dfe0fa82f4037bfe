"""The events a reconcile leaves (a driver action with no write after it) ride on the next write
of any reconcile, or are written on their own after ``CARRY_EVENTS_S``: issue 13's cold start
had a transaction per VM for its "Started" event alone."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.conftest import eventually, make_plane
from virtplane.controllers import context
from virtplane.controllers.context import ControllerContext
from virtplane.domain.resources import Metadata, VirtualMachine
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.store import Conflict, Store
from virtplane.store.settings import Settings
from virtplane.store.store import EventRecord


def bare_context(store: Store) -> ControllerContext:
    """A context with no controllers around it: only this test writes."""

    def no_driver(*_: object) -> None:
        raise AssertionError("no host is used here")

    return ControllerContext(
        store=store,
        cache=Cache(store),
        hosts=HostConnections(no_driver, lambda *_: None),  # type: ignore[arg-type]
        settings=Settings(store),
    )


def spy_on_lone_events(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reasons of events written in a transaction of their own."""
    alone: list[str] = []
    record_events = store.record_events

    def spy(items: Sequence[EventRecord]) -> None:
        alone.extend(reason for _kind, _name, reason, _message, _type in items)
        record_events(items)

    monkeypatch.setattr(store, "record_events", spy)
    return alone


def reasons(store: Store) -> list[str]:
    return [e.reason for e in store.list_events(limit=100)]


def bump(ctx: ControllerContext, name: str) -> VirtualMachine:
    vm = ctx.store.get(VirtualMachine, name)
    vm.status.message = f"{vm.status.message}+"
    return ctx.write(vm)


async def test_left_events_ride_on_the_next_write_of_another_reconcile(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = bare_context(store)
    store.create(VirtualMachine(metadata=Metadata(name="a")))
    store.create(VirtualMachine(metadata=Metadata(name="b")))
    alone = spy_on_lone_events(store, monkeypatch)
    with ctx.events_scope():  # a start: the driver call after the durable point, no write after it
        ctx.event(("VirtualMachine", "a"), "Started", "start issued")
    assert reasons(store) == []
    with ctx.events_scope():  # another VM's reconcile writes
        ctx.event(("VirtualMachine", "b"), "Scheduled", "placed")
        bump(ctx, "b")
    assert reasons(store) == ["Started", "Scheduled"]  # in the order they happened
    assert alone == []


async def test_left_events_are_written_on_their_own_when_no_write_comes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = bare_context(store)
    alone = spy_on_lone_events(store, monkeypatch)
    with ctx.events_scope():
        ctx.event(("VirtualMachine", "a"), "Started", "start issued")
    await eventually(lambda: reasons(store) == ["Started"], timeout=5)
    assert alone == ["Started"]


async def test_a_lost_write_race_keeps_the_carried_events_for_the_next_write(store: Store) -> None:
    ctx = bare_context(store)
    store.create(VirtualMachine(metadata=Metadata(name="a")))
    with ctx.events_scope():
        ctx.event(("VirtualMachine", "a"), "Started", "start issued")
    stale = store.get(VirtualMachine, "a")
    bump(ctx, "a")  # takes the carried event
    assert reasons(store) == ["Started"]
    with ctx.events_scope():
        ctx.event(("VirtualMachine", "a"), "Stopping", "shutdown sent")
    with pytest.raises(Conflict), ctx.events_scope():
        ctx.event(("VirtualMachine", "a"), "Lost", "described a write that lost")
        stale.status.message = "stale"
        ctx.write(stale)
    assert reasons(store) == ["Started"]
    bump(ctx, "a")
    assert reasons(store) == ["Started", "Stopping"]  # the lost write's own event is gone


async def test_a_stopping_plane_writes_what_is_carried(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "CARRY_EVENTS_S", 3600.0)  # only the stop can write it
    plane = make_plane(store)
    await plane.start()
    with plane.ctx.events_scope():
        plane.ctx.event(("VirtualMachine", "a"), "Started", "start issued")
    await plane.stop()
    assert reasons(store) == ["Started"]
