"""Controllers' writes: status only, and their events in the same transaction (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from virtplane.domain.resources import (
    EventType,
    Metadata,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.store.errors import Conflict, StatusOnly
from virtplane.store.store import EventRecord, Store


def event(reason: str) -> EventRecord:
    return ("VirtualMachine", "a", reason, "m", EventType.NORMAL)


def reasons(store: Store) -> list[str]:
    return [e.reason for e in store.list_events(kind="VirtualMachine", name="a")]


def vm(store: Store) -> VirtualMachine:
    return store.create(VirtualMachine(metadata=Metadata(name="a"), spec=VirtualMachineSpec()))


def test_events_go_with_the_write(store: Store) -> None:
    current = vm(store)
    current.status.phase = VMPhase.RUNNING
    written = store.update_status(current, events=[event("Started")])
    assert written.status.phase is VMPhase.RUNNING
    assert reasons(store) == ["Started"]


def test_a_write_that_loses_its_race_writes_no_event(store: Store) -> None:
    stale = vm(store)
    winner = stale.model_copy(deep=True)
    winner.status.message = "first"
    store.update_status(winner)
    stale.status.message = "second"
    with pytest.raises(Conflict):
        store.update_status(stale, events=[event("Started")])
    assert reasons(store) == [], "no event for a change that never happened"


def test_an_unchanged_object_still_gets_its_events(store: Store) -> None:
    """The events of a reconcile whose write changes nothing (they describe a driver action)."""
    current = vm(store)
    store.update_status(current, events=[event("StartFailed")])
    assert reasons(store) == ["StartFailed"]
    assert store.get(VirtualMachine, "a").metadata.resource_version == current.metadata.resource_version


@pytest.mark.parametrize(
    "change",
    [
        lambda v: setattr(v.spec, "run_policy", RunPolicy.MANUAL),
        lambda v: v.metadata.labels.update({"app": "web"}),
        lambda v: v.metadata.annotations.update({"note": "mine"}),
    ],
    ids=["spec", "label", "user annotation"],
)
def test_a_status_write_cannot_change_what_the_api_owns(store: Store, change: object) -> None:
    current = vm(store)
    change(current)  # type: ignore[operator]
    current.status.message = "and a status change"
    with pytest.raises(StatusOnly):
        store.update_status(current, events=[event("Sneaky")])
    stored = store.get(VirtualMachine, "a")
    assert stored.status.message == "" and stored.spec.run_policy is not RunPolicy.MANUAL
    assert reasons(store) == []


def test_a_status_write_may_change_finalizers_and_intents(store: Store) -> None:
    current = vm(store)
    current.metadata.finalizers.append("virtplane.io/domain")
    current.metadata.annotations["virtplane.io/start"] = "true"
    written = store.update_status(current)
    assert written.metadata.finalizers == ["virtplane.io/domain"]
    assert written.metadata.annotations == {"virtplane.io/start": "true"}
    assert written.metadata.generation == 1, "no spec change"


def test_mutate_status_only_refuses_a_spec_change(store: Store) -> None:
    vm(store)
    with pytest.raises(StatusOnly):
        store.mutate(VirtualMachine, "a", lambda v: setattr(v.spec, "cpu", 4), status_only=True)
    store.mutate(VirtualMachine, "a", lambda v: setattr(v.spec, "cpu", 4))  # the API's general write
    assert store.get(VirtualMachine, "a").spec.cpu == 4
