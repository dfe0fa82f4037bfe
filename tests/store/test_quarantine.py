"""A body the current models cannot read is quarantined, named, and its claims kept (issue 30)."""

from __future__ import annotations

import logging

import pytest

from tests.store.upgrades import CLAIMS, forget_fingerprints, set_body, unreadable_vm
from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Metadata, VirtualMachine
from virtplane.store import NotFound
from virtplane.store.store import Store


def test_an_unreadable_body_is_named_and_set_aside_and_the_rest_is_served(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    unreadable_vm(store)
    revision = store.revision()
    caplog.set_level(logging.INFO, logger="virtplane.store.upgrade")

    report = store.migrate()

    (line,) = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    assert line.startswith(
        "store upgrade: quarantined VirtualMachine bad: spec.cpu: Input should be a valid integer"
    )
    assert [r.levelno for r in caplog.records if "quarantined" in r.getMessage()] == [logging.WARNING]
    assert "still holding ip/lan 10.1.0.20, mac 52:54:00:00:00:01 until it is deleted" in line, "says so"
    assert [item.name for item in report.bodies.unreadable] == ["bad"]
    assert [vm.metadata.name for vm in store.list_objects(VirtualMachine)] == ["good"]
    (kept,) = store.quarantined()
    assert (kept.kind, kept.name) == ("VirtualMachine", "bad")
    assert kept.reason.startswith("spec.cpu: ") and '"cpu":"lots"' in kept.body.replace(" ", "")
    assert kept.document()["body"]["spec"]["cpu"] == "lots"
    held = {claim: holder.name for claim, holder in store.claims("")}
    assert held == {claim: "bad" for claim in CLAIMS}, "nothing else may take its address or MAC"
    (event,) = store.list_events(kind="VirtualMachine", name="bad")
    assert (event.reason, event.type.value) == ("Quarantined", "Warning") and "spec.cpu" in event.message
    assert [(c.name, c.op) for c in store.changes_since(revision, 10)] == [("bad", "deleted")], (
        "a watcher sees it go"
    )

    assert store.migrate().bodies.unreadable == [], "once set aside, it is not read again"


def test_deleting_a_quarantined_object_releases_its_claims(store: Store) -> None:
    unreadable_vm(store)
    store.migrate()

    (deleted,) = store.delete_quarantined("VirtualMachine", "bad", by="admin")

    assert deleted.name == "bad" and store.quarantined() == []
    assert store.claims("") == []
    assert store.list_events(kind="VirtualMachine", name="bad")[-1].reason == "QuarantineDeleted"
    with pytest.raises(NotFound):
        store.delete_quarantined("VirtualMachine", "bad", by="admin")


def test_an_object_made_again_and_quarantined_again_keeps_both_records(store: Store) -> None:
    """The first record is neither lost nor left holding its claims unlisted."""
    unreadable_vm(store)
    store.migrate()
    again = Claim("mac", "52:54:00:00:00:02")
    store.create(VirtualMachine(metadata=Metadata(name="bad")), claims=[again])
    set_body(store, "VirtualMachine", "bad", lambda body: body["spec"].update(cpu="more"))
    forget_fingerprints(store)
    store.migrate()

    first, second = store.quarantined()
    assert (first.name, second.name) == ("bad", "bad") and first.uid != second.uid
    assert '"lots"' in first.body and '"more"' in second.body

    (deleted,) = store.delete_quarantined("VirtualMachine", "bad", by="admin", uid=first.uid)
    assert deleted.uid == first.uid and store.quarantined() == [second]
    assert [claim for claim, _ in store.claims("")] == [again], "the first's released, the second's held"
