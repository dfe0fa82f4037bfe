"""Stored bodies are kept in the current schema, so lists can serve them as they are (issue 13, row 8)."""

from __future__ import annotations

import json

from sqlalchemy import text

from virtplane.domain.resources import KINDS, Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.store.bodies import normalize_bodies, schema_fingerprint
from virtplane.store.lists import list_page
from virtplane.store.store import Store


def _stored_body(store: Store, name: str) -> dict[str, object]:
    with store.engine.connect() as connection:
        body = connection.execute(
            text("SELECT body FROM objects WHERE kind = 'VirtualMachine' AND name = :name"), {"name": name}
        ).scalar_one()
    return dict(json.loads(body))


def test_bodies_written_by_an_older_schema_are_rewritten_in_the_current_one(store: Store) -> None:
    created = store.create(VirtualMachine(metadata=Metadata(name="old"), spec=VirtualMachineSpec(cpu=2)))
    store.create(VirtualMachine(metadata=Metadata(name="new")))
    # What an older release wrote: no termination_grace_period_s yet, and another schema.
    old = _stored_body(store, "old")
    del old["spec"]["termination_grace_period_s"]  # type: ignore[attr-defined]
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE objects SET body = :body WHERE kind = 'VirtualMachine' AND name = 'old'"),
            {"body": json.dumps(old)},
        )
        connection.execute(text("UPDATE feed_state SET revision = 1 WHERE name = 'schema:VirtualMachine'"))
    revision = store.revision()

    store.migrate()  # what a server of the new release does first

    page = list_page(store, "VirtualMachine", limit=10)
    assert [json.loads(body) for body in page.bodies] == [
        store.get(VirtualMachine, "new").model_dump(mode="json"),
        created.model_dump(mode="json"),
    ], "a list serves what a GET of each object answers"
    assert store.revision() == revision, "the rewrite changes no object: no revision, nobody woken"


def test_an_unchanged_schema_rewrites_nothing(store: Store) -> None:
    store.create(VirtualMachine(metadata=Metadata(name="a")))
    with store.engine.begin() as connection:
        assert not normalize_bodies(connection).changed()
    with store.engine.connect() as connection:
        recorded = {
            row.name: row.revision
            for row in connection.execute(text("SELECT name, revision FROM feed_state"))
        }
    assert all(recorded[f"schema:{cls.KIND}"] == schema_fingerprint(cls) for cls in KINDS)


def test_the_fingerprint_follows_the_shape() -> None:
    class Wider(VirtualMachine):
        extra: int = 0

    assert schema_fingerprint(Wider) != schema_fingerprint(VirtualMachine)
    assert 0 <= schema_fingerprint(VirtualMachine) < 2**31
