"""Controllers' writes: status only, and their events in the same transaction (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
import sqlalchemy

from virtplane.domain.resources import (
    EventType,
    Metadata,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.store.database import EventRecord
from virtplane.store.errors import AlreadyExists, Conflict, StatusOnly
from virtplane.store.store import Store
from virtplane.store.writes import StatusWrite


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


# --- Creations: their events in the same transaction, and many objects in one ---


class Commits:
    """Counts the store's committed transactions (reads roll back, so these are writes)."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        sqlalchemy.event.listen(store.engine, "commit", self._on_commit)

    def _on_commit(self, _connection: object) -> None:
        self.count += 1


def test_a_creation_writes_its_events_in_its_own_transaction(store: Store) -> None:
    commits = Commits(store)
    vm_a = VirtualMachine(metadata=Metadata(name="a"), spec=VirtualMachineSpec())
    store.create(vm_a, events=[event("Created")])
    assert commits.count == 1
    assert reasons(store) == ["Created"]
    with pytest.raises(AlreadyExists):
        store.create(vm_a, events=[event("Created")])
    assert reasons(store) == ["Created"], "no event for a creation that never happened"


def test_create_many_answers_for_each_object_in_one_transaction(store: Store) -> None:
    store.create(VirtualMachine(metadata=Metadata(name="taken")))
    before = store.revision()
    commits = Commits(store)
    names = ["b", "taken", "c", "b", "d"]  # one exists, one comes twice
    outcomes = store.create_many(
        [VirtualMachine(metadata=Metadata(name=n, labels={"n": str(i)})) for i, n in enumerate(names)],
        events=lambda obj: [
            (obj.KIND, obj.metadata.name, "Created", obj.metadata.labels["n"], EventType.NORMAL)
        ],
    )
    assert commits.count == 1
    assert [type(o).__name__ for o in outcomes] == [
        "VirtualMachine",
        "AlreadyExists",
        "VirtualMachine",
        "AlreadyExists",
        "VirtualMachine",
    ]
    created = [o for o in outcomes if isinstance(o, VirtualMachine)]
    assert [o.metadata.labels["n"] for o in created] == ["0", "2", "4"]
    assert all(store.get(VirtualMachine, o.metadata.name) == o for o in created)
    revisions = [o.metadata.resource_version for o in created]
    assert revisions == sorted(set(revisions)) and revisions[0] > before, "a revision each, in order"
    assert [(c.name, c.op) for c in store.changes_since(before)] == [
        ("b", "added"),
        ("c", "added"),
        ("d", "added"),
    ]
    events = store.list_events(kind="VirtualMachine")
    assert [(e.name, e.message) for e in events] == [("b", "0"), ("c", "2"), ("d", "4")]
    assert store.create_many([]) == []


def two(store: Store) -> tuple[VirtualMachine, VirtualMachine]:
    spec = VirtualMachineSpec()
    return (
        store.create(VirtualMachine(metadata=Metadata(name="a"), spec=spec)),
        store.create(VirtualMachine(metadata=Metadata(name="b"), spec=spec)),
    )


def test_writes_together_are_one_transaction_with_the_events(store: Store) -> None:
    a, b = two(store)
    notified: list[int] = []
    store.add_listener(notified.append)
    a.status.phase = VMPhase.RUNNING
    b.status.phase = VMPhase.STOPPING
    [written] = store.write_each([StatusWrite([a, b], [event("Both")])])
    assert isinstance(written, list)
    assert [w.status.phase for w in written] == [VMPhase.RUNNING, VMPhase.STOPPING]
    assert written[1].metadata.resource_version == written[0].metadata.resource_version + 1
    assert notified == [written[1].metadata.resource_version]  # one commit, one wake-up
    assert store.get(VirtualMachine, "b") == written[1]
    assert reasons(store) == ["Both"]


@pytest.mark.parametrize("refused", ["a lost race", "a spec change"])
def test_writes_together_are_all_or_none(store: Store, refused: str) -> None:
    a, b = two(store)
    a.status.phase = VMPhase.RUNNING
    if refused == "a lost race":
        fresh = store.get(VirtualMachine, "b")
        fresh.status.message = "written meanwhile"
        store.update_status(fresh)
        b.status.phase = VMPhase.STOPPING
        error: type[Exception] = Conflict
    else:
        b.spec.cpu = 4
        error = StatusOnly
    before = store.revision()
    [outcome] = store.write_each([StatusWrite([a, b], [event("Both")])])
    assert isinstance(outcome, error)
    assert store.get(VirtualMachine, "a").status.phase is not VMPhase.RUNNING
    assert store.revision() == before
    assert reasons(store) == []


# --------------------------------------------------------------------- many writers, one commit


def commits(store: Store) -> list[int]:
    """Counts the database's commits from now on (SQLAlchemy's commit event)."""
    counted: list[int] = []
    sqlalchemy.event.listen(store.engine, "commit", lambda _: counted.append(1))
    return counted


def three(store: Store) -> list[VirtualMachine]:
    spec = VirtualMachineSpec()
    return [store.create(VirtualMachine(metadata=Metadata(name=n), spec=spec)) for n in "abc"]


def vm_event(name: str, reason: str) -> EventRecord:
    return ("VirtualMachine", name, reason, "m", EventType.NORMAL)


def test_many_writers_are_one_commit_and_a_lost_race_is_its_own(store: Store) -> None:
    a, b, c = three(store)
    fresh = store.get(VirtualMachine, "b")
    fresh.status.message = "written meanwhile"
    store.update_status(fresh)
    for one in (a, b, c):
        one.status.phase = VMPhase.RUNNING
    counted = commits(store)
    notified: list[int] = []
    store.add_listener(notified.append)
    outcomes = store.write_each(
        [
            StatusWrite([a], [vm_event("a", "Started")]),
            StatusWrite([b], [vm_event("b", "Started")]),  # stale: loses
            StatusWrite([c], [vm_event("c", "Started")]),
            StatusWrite([], [vm_event("c", "Alone")]),  # events without an object
        ]
    )
    assert counted == [1]
    first, lost, third, alone = outcomes
    assert isinstance(lost, Conflict)
    assert isinstance(first, list) and isinstance(third, list) and alone == []
    assert store.get(VirtualMachine, "a") == first[0] and first[0].status.phase is VMPhase.RUNNING
    assert store.get(VirtualMachine, "b").status.message == "written meanwhile"
    assert store.get(VirtualMachine, "c") == third[0]
    assert notified == [third[0].metadata.resource_version]  # one commit, one wake-up
    events = store.list_events(kind="VirtualMachine")
    assert [(e.name, e.reason) for e in events] == [("a", "Started"), ("c", "Started"), ("c", "Alone")]


def test_many_writers_roll_back_together_on_any_other_error(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a StoreError is one writer's own outcome: anything else (the database failing)
    leaves nothing of any of them, also of those written already."""
    a, b, _ = three(store)
    a.status.phase = b.status.phase = VMPhase.RUNNING
    apply = store._apply

    def breaks_on_b(connection: sqlalchemy.Connection, obj: VirtualMachine, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if obj.metadata.name == "b":
            raise sqlalchemy.exc.OperationalError("UPDATE", {}, Exception("disk I/O error"))
        return apply(connection, obj, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_apply", breaks_on_b)
    before = store.revision()
    with pytest.raises(sqlalchemy.exc.OperationalError):
        store.write_each([StatusWrite([a], [vm_event("a", "Started")]), StatusWrite([b])])
    assert store.revision() == before
    assert store.get(VirtualMachine, "a").status.phase is not VMPhase.RUNNING
    assert store.list_events(kind="VirtualMachine") == []


def test_a_writer_is_checked_after_the_writers_before_it_wrote(store: Store) -> None:
    """Two reconciles' writes of one object read at one version meet in a commit: the first
    wins, the second lost the race (its own outcome), and the first's write stands."""
    a, _, _ = three(store)
    first, second = a.model_copy(deep=True), a.model_copy(deep=True)
    first.status.message, second.status.message = "first", "second"
    won, lost = store.write_each([StatusWrite([first]), StatusWrite([second], [vm_event("a", "Late")])])
    assert isinstance(won, list) and isinstance(lost, Conflict)
    assert store.get(VirtualMachine, "a").status.message == "first"
    assert store.list_events(kind="VirtualMachine") == []
