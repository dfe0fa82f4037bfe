"""Creating objects: one, or many of one kind in one transaction.

The store sets what a new object cannot choose: uid (unless given), generation 1, the
timestamps and the revision of its creation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Resource
from virtplane.store import claims as claim_table
from virtplane.store import statements
from virtplane.store.claims import Holder
from virtplane.store.database import Database, EventRecord, utcnow
from virtplane.store.errors import AlreadyExists
from virtplane.store.schema import field_values
from virtplane.store.sealing import seal_secret_doc

R = TypeVar("R", bound=Resource)


class ObjectCreates(Database):
    def create(self, obj: R, *, claims: Sequence[Claim] = (), events: Sequence[EventRecord] = ()) -> R:
        """Insert a new object. uid, generation, timestamps and resource_version are set here.

        ``claims`` are values the object holds alone, stored with it (``ClaimTaken`` if one is
        another's: then nothing is written). ``events`` are appended in the same transaction:
        they exist exactly when the object does.
        """
        kind, name = obj.KIND, obj.metadata.name
        try:
            with self._write() as connection:
                exists = self.prepared.get_version.first(connection, statements.key(kind, name))
                if exists is not None:
                    raise AlreadyExists(kind, name)
                self._append_events(connection, events)
                if claims:  # the holder's uid is chosen here so the claims can name it
                    uid = obj.metadata.uid or str(uuid.uuid4())
                    obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"uid": uid})})
                    claim_table.replace_claims(connection, Holder(kind, name, uid), claims)
                new = self._insert(connection, obj, utcnow())
        except IntegrityError as e:  # another replica created it since we looked
            raise AlreadyExists(kind, name) from e
        self._notify(new.metadata.resource_version)
        return new

    def create_many(
        self, objs: Sequence[R], *, events: Callable[[R], Sequence[EventRecord]] | None = None
    ) -> list[R | AlreadyExists]:
        """Create objects of one kind in one transaction; for each, the new object or why not.

        A name that exists (or comes twice) is that object's ``AlreadyExists``; the others
        are created, each with its own revision, and ``events(obj)`` of each created object
        in the same transaction. If another replica creates one of the names meanwhile, the
        objects are created one at a time instead, with the same answers.
        """
        if not objs:
            return []
        kind = objs[0].KIND
        if any(kind != obj.KIND for obj in objs):
            raise ValueError("create_many takes objects of one kind")
        now = utcnow()
        outcomes: list[R | AlreadyExists] = []
        try:
            with self._write() as connection:
                names = sorted({obj.metadata.name for obj in objs})
                taken = set(
                    connection.execute(statements.GET_NAMES, {"b_kind": kind, "b_names": names}).scalars()
                )
                fresh: list[R] = []
                for obj in objs:
                    if obj.metadata.name in taken:
                        outcomes.append(AlreadyExists(kind, obj.metadata.name))
                    else:
                        taken.add(obj.metadata.name)
                        fresh.append(obj)
                        outcomes.append(obj)
                if events is not None:  # events before revisions: the lock order of every writer
                    self._append_events(connection, [e for obj in fresh for e in events(obj)])
                created = {id(obj): self._insert(connection, obj, now) for obj in fresh}
        except IntegrityError:
            return [self._create_or_refusal(obj, events) for obj in objs]
        if created:
            self._notify(max(new.metadata.resource_version for new in created.values()))
        return [o if isinstance(o, AlreadyExists) else created[id(o)] for o in outcomes]

    def _create_or_refusal(
        self, obj: R, events: Callable[[R], Sequence[EventRecord]] | None
    ) -> R | AlreadyExists:
        try:
            return self.create(obj, events=events(obj) if events is not None else ())
        except AlreadyExists as exists:
            return exists

    def _insert(self, connection: Connection, obj: R, now: datetime) -> R:
        """INSERT ``obj`` as a new object with its own revision; returns it as stored."""
        kind, name = obj.KIND, obj.metadata.name
        doc = obj.model_dump(mode="json")  # a dump and a validation cost a third of a deep copy
        meta = doc["metadata"]
        meta["uid"] = meta["uid"] or str(uuid.uuid4())
        meta["generation"] = 1
        meta["created_at"] = meta["updated_at"] = now
        meta["deletion_requested_at"] = None
        meta["resource_version"] = revision = self._record_change(connection, kind, name, "added")
        seal_secret_doc(self.keyring, kind, doc, None)
        new = type(obj).model_validate(doc)
        self.prepared.insert_object.rowcount(
            connection,
            {
                **statements.key(kind, name),
                "b_uid": meta["uid"],
                "b_revision": revision,
                "b_generation": 1,
                "b_body": new.model_dump_json(),
                **{f"b_{column}": value for column, value in field_values(doc).items()},
            },
        )
        return new
