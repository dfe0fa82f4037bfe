"""Writing existing objects: update, status-only update, mutate, delete.

Each write locks the object's row, compares versions, and is an ``UPDATE ... WHERE
resource_version = <the version it read>`` whose row count is checked, so a lost race
is a ``Conflict`` and never a lost update. A write that changes nothing is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Connection

from virtplane.domain.intents import split_annotations
from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Resource
from virtplane.store import claims as claim_table
from virtplane.store import statements
from virtplane.store.claims import Holder
from virtplane.store.database import LOCK_EVENTS, EventRecord, utcnow
from virtplane.store.errors import Conflict, NotFound, StatusOnly, StoreError
from virtplane.store.reads import ObjectReads
from virtplane.store.schema import field_values
from virtplane.store.sealing import seal_secret_doc

R = TypeVar("R", bound=Resource)

# Metadata a writer cannot change: identity, and what the store itself keeps up to date.
_KEPT_BY_THE_STORE = ("uid", "created_at", "generation", "resource_version", "updated_at")


def _owned_by_users(doc: dict[str, Any]) -> Any:
    """What only the API writes (of an object's JSON document): spec, labels and the user's
    (non-system) annotations."""
    meta = doc["metadata"]
    return (doc.get("spec"), meta["labels"], split_annotations(meta["annotations"])[0])


class StoredRow(NamedTuple):
    body: str
    resource_version: int


class StoredObject(NamedTuple):
    """A row ``_check`` locked and found writable, and its body as plain JSON."""

    row: StoredRow
    stored: dict[str, Any]


class StatusWrite(NamedTuple):
    """One writer's part of ``write_each``: status writes of its objects, all or none (no
    object: its events alone), with its events."""

    objs: Sequence[Resource]
    events: Sequence[EventRecord] = ()


class ObjectWrites(ObjectReads):
    def _locked_row(self, connection: Connection, kind: str, name: str) -> StoredRow | None:
        """The object's body and version, its row locked against other writers until commit."""
        row = self.prepared.locked_row.first(connection, statements.key(kind, name))
        return None if row is None else StoredRow(row[0], int(row[1]))

    def _write_object(
        self,
        connection: Connection,
        kind: str,
        name: str,
        expected: int,
        revision: int,
        generation: int,
        body: str,
        fields: Mapping[str, str | None],
    ) -> None:
        """UPDATE the object if it still has version ``expected``; a lost race is a Conflict.
        ``fields``: the field columns whose value changed, and their new values."""
        updated = self.prepared.update_object(frozenset(fields)).rowcount(
            connection,
            {
                **statements.key(kind, name),
                "b_expected": expected,
                "b_revision": revision,
                "b_generation": generation,
                "b_body": body,
                **{f"b_{column}": value for column, value in fields.items()},
            },
        )
        if updated != 1:
            actual = self.prepared.get_version.first(connection, statements.key(kind, name))
            if actual is None:
                raise NotFound(kind, name)
            raise Conflict(kind, name, expected, int(actual[0]))

    def update(
        self,
        obj: R,
        *,
        check_version: bool = True,
        events: Sequence[EventRecord] = (),
        claims: Sequence[Claim] | None = None,
    ) -> R:
        """Write metadata, spec and status of ``obj`` in one go.

        With ``check_version`` the write succeeds only if the stored resource_version is
        still ``obj.metadata.resource_version`` (optimistic concurrency). ``generation``
        goes up when the spec changed. Identity fields (uid, created_at) are kept. A write
        that changes nothing is skipped and returns the stored object. ``events`` are
        appended in the same transaction: they exist exactly when the write does (also
        when it changed nothing; never when it failed). ``claims``, when given, become the
        object's claims in the same transaction (``ClaimTaken`` if one is another's).
        """
        return self._update(obj, check_version=check_version, events=events, status_only=False, claims=claims)

    def update_status(self, obj: R, *, events: Sequence[EventRecord] = ()) -> R:
        """What controllers write: status, finalizers and system annotations (the durable
        intents under ``virtplane.io/``), with a version check and ``events``, as ``update``.

        Spec, labels and the user's annotations belong to the API: a write that would change
        them raises ``StatusOnly`` and writes nothing. The few controller steps that must
        change a spec go through ``update`` under a name that says why (see
        ``ControllerContext.write``'s ``Change(spec_because=...)``).
        """
        return self._update(obj, check_version=True, events=events, status_only=True)

    def write_each(self, writes: Sequence[StatusWrite]) -> list[list[Resource] | StoreError]:
        """Many writers' status writes in one transaction and one commit (a group commit):
        each all or none on its own (several objects of one writer: an operation's admission,
        the VM's intent and the operation InProgress, are seen together or not at all). A lost
        race or a refused change (a ``StoreError``) is found by a writer's checks, before
        anything of it is written, and is that writer's outcome; any other error rolls back
        all of them and is raised. Every outcome is final when this returns: what it wrote is
        committed."""
        outcomes: list[list[Resource] | StoreError] = []
        highest: int | None = None
        docs_each = [[obj.model_dump(mode="json") for obj in write.objs] for write in writes]
        with self._write() as connection:
            if any(write.events for write in writes):
                # before any revision: the lock order of every write (events, then revisions)
                self._advisory_lock(connection, LOCK_EVENTS)
            for write, docs in zip(writes, docs_each, strict=True):
                # Checked after the writers before it wrote (one of them may have written the
                # same object), and all of its objects before any is written: no SAVEPOINT to
                # roll back to (two statements a writer).
                try:
                    checked = [
                        self._check(connection, obj, doc, check_version=True, status_only=True)
                        for obj, doc in zip(write.objs, docs, strict=True)
                    ]
                except StoreError as error:
                    outcomes.append(error)
                    continue
                self._append_events(connection, write.events)
                written = [
                    self._apply(connection, obj, doc, stored)
                    for obj, doc, stored in zip(write.objs, docs, checked, strict=True)
                ]
                revisions = [revision for _, revision in written if revision is not None]
                highest = revisions[-1] if revisions else highest
                outcomes.append([obj for obj, _ in written])
        if highest is not None:
            self._notify(highest)
        return outcomes

    def _update(
        self,
        obj: R,
        *,
        check_version: bool,
        events: Sequence[EventRecord],
        status_only: bool,
        claims: Sequence[Claim] | None = None,
    ) -> R:
        [written] = self._write_objects(
            [obj], events, check_version=check_version, status_only=status_only, claims=claims
        )
        return written

    def _write_objects(
        self,
        objs: Sequence[R],
        events: Sequence[EventRecord],
        *,
        check_version: bool,
        status_only: bool,
        claims: Sequence[Claim] | None = None,
    ) -> list[R]:
        """One transaction: the events, then each object (``claims``: the one object's)."""
        docs = [obj.model_dump(mode="json") for obj in objs]
        with self._write() as connection:
            self._append_events(connection, events)
            written = [
                self._write_one(
                    connection, obj, doc, check_version=check_version, status_only=status_only, claims=claims
                )
                for obj, doc in zip(objs, docs, strict=True)
            ]
        revisions = [revision for _, revision in written if revision is not None]
        if revisions:
            self._notify(revisions[-1])
        return [obj for obj, _ in written]

    def _write_one(
        self,
        connection: Connection,
        obj: R,
        doc: dict[str, Any],
        *,
        check_version: bool,
        status_only: bool,
        claims: Sequence[Claim] | None = None,
    ) -> tuple[R, int | None]:
        """One object's write inside the caller's transaction (after its events: the lock order
        is events, then revisions): the object as stored, and the revision it drew (None: it
        changed nothing)."""
        stored = self._check(connection, obj, doc, check_version=check_version, status_only=status_only)
        return self._apply(connection, obj, doc, stored, claims)

    def _check(
        self,
        connection: Connection,
        obj: Resource,
        doc: dict[str, Any],
        *,
        check_version: bool,
        status_only: bool,
    ) -> StoredObject:
        """The object's row, locked, if ``obj`` may be written over it: a ``StoreError`` (gone,
        a lost race, a change of what only the API writes) when not. Writes nothing."""
        # The comparisons run on JSON documents: one dump of the caller's object (``doc``) and
        # the stored body parsed as plain JSON (bodies are kept in the current schema,
        # ``bodies.py``), instead of a deep copy and a dump per comparison.
        kind, name = obj.KIND, obj.metadata.name
        row = self._locked_row(connection, kind, name)
        if row is None:
            raise NotFound(kind, name)
        if check_version and obj.metadata.resource_version != row.resource_version:
            raise Conflict(kind, name, obj.metadata.resource_version, row.resource_version)
        stored = json.loads(row.body)
        if status_only and _owned_by_users(doc) != _owned_by_users(stored):
            # A body another version of the code wrote (a replica not yet upgraded) may
            # lack a default the current schema adds: compare it in the current shape.
            stored = type(obj).model_validate_json(row.body).model_dump(mode="json")
            if _owned_by_users(doc) != _owned_by_users(stored):
                raise StatusOnly(kind, name)
        return StoredObject(row, stored)

    def _apply(
        self,
        connection: Connection,
        obj: R,
        doc: dict[str, Any],
        checked: StoredObject,
        claims: Sequence[Claim] | None = None,
    ) -> tuple[R, int | None]:
        """Write ``doc`` over the checked row: the object as stored, and its revision (None:
        it changed nothing, and nothing was written)."""
        kind, name, cls = obj.KIND, obj.metadata.name, type(obj)
        row, stored = checked
        if claims is not None:
            claim_table.replace_claims(connection, Holder(kind, name, stored["metadata"]["uid"]), claims)
        meta, stored_meta = doc["metadata"], stored["metadata"]
        for field in _KEPT_BY_THE_STORE:
            meta[field] = stored_meta[field]
        seal_secret_doc(self.keyring, kind, doc, stored)
        if doc == stored:
            return cls.model_validate_json(row.body), None
        if doc.get("spec") != stored.get("spec"):
            meta["generation"] += 1
        revision = self._record_change(connection, kind, name, "modified")
        meta["updated_at"] = utcnow()
        meta["resource_version"] = revision
        new = cls.model_validate(doc)
        fields, stored_fields = field_values(doc), field_values(stored)
        changed = {column: value for column, value in fields.items() if value != stored_fields[column]}
        body = new.model_dump_json()
        self._write_object(
            connection, kind, name, row.resource_version, revision, meta["generation"], body, changed
        )
        return new, revision

    def mutate(
        self,
        cls: type[R],
        name: str,
        change: Callable[[R], None],
        *,
        attempts: int = 20,
        events: Sequence[EventRecord] = (),
        status_only: bool = False,
        claims: Callable[[R], Sequence[Claim]] | None = None,
    ) -> R:
        """Read, apply ``change`` to a copy, write with a version check; re-read on Conflict.
        ``claims``, when given, says what the changed object holds (see ``update``).

        For small server-side edits (an intent annotation, a status field) where the
        change is a pure function of the current object; ``status_only`` as ``update_status``.
        """
        for attempt in range(attempts):
            current = self.get(cls, name)
            change(current)
            try:
                return self._update(
                    current,
                    check_version=True,
                    events=events,
                    status_only=status_only,
                    claims=None if claims is None else claims(current),
                )
            except Conflict:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def delete(self, cls: type[Resource], name: str, *, expected_version: int | None = None) -> bool:
        """Delete an object, or mark it for deletion while finalizers remain.

        Returns True if the row is gone, False if it was only marked.
        """
        kind = cls.KIND
        with self._write() as connection:
            row = self._locked_row(connection, kind, name)
            if row is None:
                raise NotFound(kind, name)
            if expected_version is not None and expected_version != row.resource_version:
                raise Conflict(kind, name, expected_version, row.resource_version)
            current = cls.model_validate_json(row.body)
            if current.metadata.finalizers:
                if current.metadata.deletion_requested_at is not None:
                    return False
                current.metadata.deletion_requested_at = utcnow()
                revision = self._record_change(connection, kind, name, "modified")
                current.metadata.resource_version = revision
                self._write_object(
                    connection,
                    kind,
                    name,
                    row.resource_version,
                    revision,
                    current.metadata.generation,
                    current.model_dump_json(),
                    {},  # a deletion mark changes no field
                )
                gone = False
            else:
                revision = self._record_change(connection, kind, name, "deleted")
                result = connection.execute(
                    statements.DELETE_OBJECT,
                    {**statements.key(kind, name), "b_expected": row.resource_version},
                )
                if result.rowcount != 1:  # cannot happen while the row is locked
                    raise Conflict(kind, name, row.resource_version, -1)
                claim_table.release(connection, current.metadata.uid)
                gone = True
        self._notify(revision)
        return gone
