"""The durable store: resources with optimistic concurrency, a change feed, events, tokens.

One class over SQLAlchemy Core, the same code for SQLite (the embedded default, WAL
mode) and PostgreSQL. Every write is one short transaction that (1) appends a row to
``changes``, whose id is the new store-wide revision, and (2) writes the object with
``resource_version`` = that revision, guarded by the version the caller read. A
stale write raises ``Conflict``; nothing is ever half-written.

Several replicas may share one PostgreSQL database, so two rules hold under real
concurrency there:

- The version check cannot be raced: a writer locks the object's row (``SELECT ...
  FOR UPDATE``) before comparing versions, and the write itself is an ``UPDATE ...
  WHERE resource_version = <the version it read>`` whose row count is checked.
- Revisions become visible in the order they were handed out. A writer takes a
  transaction-scoped advisory lock just before it draws the next revision and holds it
  until it commits, so revision N+1 can only be drawn after N committed (or rolled
  back). A reader of ``changes_since`` therefore never sees a revision while a smaller
  one is still in flight, and a watcher that remembers the highest revision it saw
  misses nothing. Events get the same treatment under their own lock, for readers
  that follow them by id. On SQLite the database's single writer gives both for free.

Calls are synchronous and short. Async code calls them directly (SQLite answers in
well under a millisecond); FastAPI runs sync routes in its thread pool.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import ConnectionPoolEntry

from virtplane.domain.intents import split_annotations
from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Event, EventType, Resource
from virtplane.store import claims as claim_table
from virtplane.store import schema
from virtplane.store.claims import Holder
from virtplane.store.errors import AlreadyExists, Conflict, NotFound, StatusOnly

R = TypeVar("R", bound=Resource)

ChangeListener = Callable[[int], None]
"""Called after each commit with the new revision; from whichever thread wrote."""

EventRecord = tuple[str, str, str, str, EventType]
"""An event to append: (kind, name, reason, message, type)."""


@dataclass(frozen=True)
class Change:
    revision: int
    kind: str
    name: str
    op: str  # "added" | "modified" | "deleted"


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite hands back naive UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Keys of the transaction-scoped PostgreSQL advisory locks (any fixed 64-bit numbers).
_LOCK_REVISIONS = 0x7670_0001  # drawing a revision and committing it
_LOCK_EVENTS = 0x7670_0002  # drawing an event id and committing it
_LOCK_MIGRATE = 0x7670_0003  # running the Alembic migrations


# The statements of the hot paths, built once: on SQLite, building a statement cost more
# than running it (a read 0.5 ms, of which the query 0.02).
_objects = schema.objects


def _by_key() -> tuple[Any, ...]:
    return (_objects.c.kind == bindparam("b_kind"), _objects.c.name == bindparam("b_name"))


_GET_BODY = select(_objects.c.body).where(*_by_key())
_GET_VERSION = select(_objects.c.resource_version).where(*_by_key())
_LOCKED_ROW = select(_objects.c.body, _objects.c.resource_version).where(*_by_key()).with_for_update()
_UPDATE_OBJECT = (
    update(_objects)
    .where(*_by_key(), _objects.c.resource_version == bindparam("b_expected"))
    .values(
        resource_version=bindparam("b_revision"),
        generation=bindparam("b_generation"),
        body=bindparam("b_body"),
    )
)
_DELETE_OBJECT = delete(_objects).where(*_by_key(), _objects.c.resource_version == bindparam("b_expected"))
_INSERT_OBJECT = insert(_objects)
_GET_MANY = select(_objects.c.name, _objects.c.body).where(
    _objects.c.kind == bindparam("b_kind"), _objects.c.name.in_(bindparam("b_names", expanding=True))
)
_GET_NAMES = select(_objects.c.name).where(
    _objects.c.kind == bindparam("b_kind"), _objects.c.name.in_(bindparam("b_names", expanding=True))
)
_INSERT_CHANGE = insert(schema.changes)
_REVISION = select(func.max(schema.changes.c.revision))
_CHANGES_SINCE = (
    select(schema.changes)
    .where(schema.changes.c.revision > bindparam("b_revision"))
    .order_by(schema.changes.c.revision)
    .limit(bindparam("b_limit"))
)
_INSERT_EVENTS = insert(schema.events)
_TOKEN_ROLE = select(schema.tokens.c.name, schema.tokens.c.role).where(
    schema.tokens.c.token_sha256 == bindparam("b_sha256")
)


def _key(kind: str, name: str) -> dict[str, Any]:
    return {"b_kind": kind, "b_name": name}


def _sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode stays consistent after a crash of the process; only an OS
    # crash can lose the last transactions. busy_timeout covers other processes.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


class Store:
    """All durable state. Construct with a SQLAlchemy URL, then call ``migrate()``."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {"echo": echo}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False}
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        # SQLite allows one writer; serialising writers inside the process avoids
        # SQLITE_BUSY churn between API threads and the controllers.
        self._write_lock = threading.Lock() if self.is_sqlite else None
        self._listeners: list[ChangeListener] = []

    # ------------------------------------------------------------------ lifecycle

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (creates it on an empty database)."""
        config = Config()
        config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.begin() as connection:
            # Replicas that start together must not both create the tables.
            self._advisory_lock(connection, _LOCK_MIGRATE)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        from virtplane.store.bodies import normalize_bodies  # it needs this module's Store

        normalize_bodies(self)

    def schema_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()

    def close(self) -> None:
        self.engine.dispose()

    def add_listener(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: ChangeListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        lock = self._write_lock
        if lock is not None:
            lock.acquire()
        try:
            with self.engine.begin() as connection:
                yield connection
        finally:
            if lock is not None:
                lock.release()

    def _notify(self, revision: int) -> None:
        for listener in list(self._listeners):
            listener(revision)

    def _advisory_lock(self, connection: Connection, key: int) -> None:
        """On PostgreSQL, wait for ``key`` and hold it until this transaction ends."""
        if not self.is_sqlite:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    def _record_change(self, connection: Connection, kind: str, name: str, op: str) -> int:
        """Append to the change feed; the new row's id is the revision of this write.

        Call it last in a write, right before the commit: from here to the commit every
        other writer waits, so revisions commit in the order they are drawn.
        """
        self._advisory_lock(connection, _LOCK_REVISIONS)
        result = connection.execute(_INSERT_CHANGE, {"kind": kind, "name": name, "op": op})
        revision = result.inserted_primary_key
        assert revision is not None
        return int(revision[0])

    @staticmethod
    def _locked_row(connection: Connection, kind: str, name: str) -> Any:
        """The object's body and version, its row locked against other writers until commit."""
        return connection.execute(_LOCKED_ROW, _key(kind, name)).first()

    @staticmethod
    def _write_object(
        connection: Connection, kind: str, name: str, expected: int, revision: int, generation: int, body: str
    ) -> None:
        """UPDATE the object if it still has version ``expected``; a lost race is a Conflict."""
        result = connection.execute(
            _UPDATE_OBJECT,
            {
                **_key(kind, name),
                "b_expected": expected,
                "b_revision": revision,
                "b_generation": generation,
                "b_body": body,
            },
        )
        if result.rowcount != 1:
            actual = connection.execute(_GET_VERSION, _key(kind, name)).scalar_one_or_none()
            if actual is None:
                raise NotFound(kind, name)
            raise Conflict(kind, name, expected, int(actual))

    # ------------------------------------------------------------------ reads

    def get(self, cls: type[R], name: str) -> R:
        with self.engine.connect() as connection:
            body = connection.execute(_GET_BODY, _key(cls.KIND, name)).scalar_one_or_none()
        if body is None:
            raise NotFound(cls.KIND, name)
        return cls.model_validate_json(body)

    def find(self, cls: type[R], name: str) -> R | None:
        try:
            return self.get(cls, name)
        except NotFound:
            return None

    def list_objects(self, cls: type[R]) -> list[R]:
        with self.engine.connect() as connection:
            bodies = connection.execute(
                select(schema.objects.c.body)
                .where(schema.objects.c.kind == cls.KIND)
                .order_by(schema.objects.c.name)
            ).scalars()
            return [cls.model_validate_json(body) for body in bodies]

    def get_many(self, cls: type[R], names: Sequence[str]) -> dict[str, R]:
        """The objects of ``names`` that exist, in one query per 500 names."""
        found: dict[str, R] = {}
        unique = sorted(set(names))
        with self.engine.connect() as connection:
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                rows = connection.execute(_GET_MANY, {"b_kind": cls.KIND, "b_names": chunk}).all()
                for row in rows:
                    found[row.name] = cls.model_validate_json(row.body)
        return found

    def names(self, kind: str) -> list[str]:
        with self.engine.connect() as connection:
            return list(
                connection.execute(
                    select(schema.objects.c.name)
                    .where(schema.objects.c.kind == kind)
                    .order_by(schema.objects.c.name)
                ).scalars()
            )

    def count(self, kind: str) -> int:
        with self.engine.connect() as connection:
            return int(
                connection.execute(
                    select(func.count()).select_from(schema.objects).where(schema.objects.c.kind == kind)
                ).scalar_one()
            )

    # ------------------------------------------------------------------ writes

    def create(self, obj: R, *, claims: Sequence[Claim] = (), events: Sequence[EventRecord] = ()) -> R:
        """Insert a new object. uid, generation, timestamps and resource_version are set here.

        ``claims`` are values the object holds alone, stored with it (``ClaimTaken`` if one is
        another's: then nothing is written). ``events`` are appended in the same transaction:
        they exist exactly when the object does.
        """
        kind, name = obj.KIND, obj.metadata.name
        try:
            with self._write() as connection:
                exists = connection.execute(_GET_VERSION, _key(kind, name)).first()
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
                taken = set(connection.execute(_GET_NAMES, {"b_kind": kind, "b_names": names}).scalars())
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
        new = type(obj).model_validate(doc)
        connection.execute(
            _INSERT_OBJECT,
            {
                "kind": kind,
                "name": name,
                "uid": meta["uid"],
                "resource_version": revision,
                "generation": 1,
                "body": new.model_dump_json(),
            },
        )
        return new

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
        ``ControllerContext.write_spec``).
        """
        return self._update(obj, check_version=True, events=events, status_only=True)

    def _update(
        self,
        obj: R,
        *,
        check_version: bool,
        events: Sequence[EventRecord],
        status_only: bool,
        claims: Sequence[Claim] | None = None,
    ) -> R:
        # The comparisons run on JSON documents: one dump of the caller's object and one of the
        # stored one (parsed into the current schema, so a default added since it was written
        # is no change), instead of a deep copy and a dump per comparison.
        kind, name, cls = obj.KIND, obj.metadata.name, type(obj)
        doc = obj.model_dump(mode="json")
        with self._write() as connection:
            row = self._locked_row(connection, kind, name)
            if row is None:
                raise NotFound(kind, name)
            if check_version and obj.metadata.resource_version != row.resource_version:
                raise Conflict(kind, name, obj.metadata.resource_version, row.resource_version)
            current = cls.model_validate_json(row.body)
            stored = current.model_dump(mode="json")
            if status_only and _owned_by_users(doc) != _owned_by_users(stored):
                raise StatusOnly(kind, name)
            if claims is not None:
                claim_table.replace_claims(connection, Holder(kind, name, current.metadata.uid), claims)
            self._append_events(connection, events)
            meta, stored_meta = doc["metadata"], stored["metadata"]
            for field in _KEPT_BY_THE_STORE:
                meta[field] = stored_meta[field]
            if doc == stored:
                return current
            if doc.get("spec") != stored.get("spec"):
                meta["generation"] += 1
            revision = self._record_change(connection, kind, name, "modified")
            meta["updated_at"] = utcnow()
            meta["resource_version"] = revision
            new = cls.model_validate(doc)
            self._write_object(
                connection,
                kind,
                name,
                row.resource_version,
                revision,
                meta["generation"],
                new.model_dump_json(),
            )
        self._notify(revision)
        return new

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
                )
                gone = False
            else:
                revision = self._record_change(connection, kind, name, "deleted")
                result = connection.execute(
                    _DELETE_OBJECT, {**_key(kind, name), "b_expected": row.resource_version}
                )
                if result.rowcount != 1:  # cannot happen while the row is locked
                    raise Conflict(kind, name, row.resource_version, -1)
                claim_table.release(connection, current.metadata.uid)
                gone = True
        self._notify(revision)
        return gone

    def claims(self, scope_prefix: str) -> list[tuple[Claim, Holder]]:
        """The claims whose scope starts with ``scope_prefix``, with their holders."""
        with self.engine.connect() as connection:
            return claim_table.list_claims(connection, scope_prefix)

    # ------------------------------------------------------------------ change feed

    def revision(self) -> int:
        with self.engine.connect() as connection:
            value = connection.execute(_REVISION).scalar_one()
        return int(value or 0)

    def changes_since(self, revision: int, limit: int = 5000) -> list[Change]:
        with self.engine.connect() as connection:
            rows = connection.execute(_CHANGES_SINCE, {"b_revision": revision, "b_limit": limit}).all()
        return [Change(row.revision, row.kind, row.name, row.op) for row in rows]

    def compact_changes(self, keep_last: int = 100_000) -> int:
        """Drop old change rows; watchers that fell further behind resync from a full list.

        The highest revision dropped is remembered (``compacted_revision``): a watch from
        before it would miss changes, so it is refused instead.
        """
        with self._write() as connection:
            top = connection.execute(select(func.max(schema.changes.c.revision))).scalar_one() or 0
            horizon = top - keep_last
            result = connection.execute(delete(schema.changes).where(schema.changes.c.revision <= horizon))
            state = schema.feed_state
            connection.execute(
                update(state)
                .where(state.c.name == "compacted", state.c.revision < horizon)
                .values(revision=horizon)
            )
            return int(result.rowcount or 0)

    def compacted_revision(self) -> int:
        """The highest revision compaction removed: changes after it are all still there."""
        with self.engine.connect() as connection:
            value = connection.execute(
                select(schema.feed_state.c.revision).where(schema.feed_state.c.name == "compacted")
            ).scalar_one_or_none()
        return int(value or 0)

    # ------------------------------------------------------------------ events

    def _append_events(self, connection: Connection, items: Sequence[EventRecord]) -> None:
        """Append events inside a writer's transaction (before its revision is drawn: the lock
        order is always events, then revisions)."""
        if not items:
            return
        self._advisory_lock(connection, _LOCK_EVENTS)
        now = utcnow()
        connection.execute(
            _INSERT_EVENTS,
            [
                {"time": now, "kind": k, "name": n, "reason": r, "message": m, "type": t.value}
                for k, n, r, m, t in items
            ],
        )

    def record_event(
        self,
        kind: str,
        name: str,
        reason: str,
        message: str = "",
        type: EventType = EventType.NORMAL,
    ) -> None:
        with self._write() as connection:
            self._advisory_lock(connection, _LOCK_EVENTS)
            connection.execute(
                insert(schema.events).values(
                    time=utcnow(), kind=kind, name=name, type=type.value, reason=reason, message=message
                )
            )

    def record_events(self, items: Sequence[EventRecord]) -> None:
        """Append many events in one transaction: (kind, name, reason, message, type)."""
        if not items:
            return
        with self._write() as connection:
            self._append_events(connection, items)

    def list_events(
        self,
        *,
        kind: str | None = None,
        name: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Event]:
        """The newest ``limit`` events matching, oldest first."""
        query = select(schema.events).where(schema.events.c.id > after_id)
        if kind:
            query = query.where(schema.events.c.kind == kind)
        if name:
            query = query.where(schema.events.c.name == name)
        query = query.order_by(schema.events.c.id.desc()).limit(limit)
        with self.engine.connect() as connection:
            rows = connection.execute(query).all()
        return [event_from_row(row) for row in reversed(rows)]

    # ------------------------------------------------------------------ tokens

    def create_token(self, name: str, role: str, token: str | None = None) -> str:
        """Store a new API token (only its hash is kept) and return it."""
        token = token or f"vp_{secrets.token_urlsafe(32)}"
        try:
            with self._write() as connection:
                existing = connection.execute(
                    select(schema.tokens.c.name).where(schema.tokens.c.name == name)
                ).first()
                if existing is not None:
                    raise AlreadyExists("Token", name)
                connection.execute(
                    insert(schema.tokens).values(
                        token_sha256=_hash(token), name=name, role=role, created_at=utcnow()
                    )
                )
        except IntegrityError as e:  # created by another replica since we looked
            raise AlreadyExists("Token", name) from e
        return token

    def token_role(self, token: str) -> tuple[str, str] | None:
        """(name, role) of a token, or None if it is unknown."""
        with self.engine.connect() as connection:
            row = connection.execute(_TOKEN_ROLE, {"b_sha256": _hash(token)}).first()
        return None if row is None else (row.name, row.role)

    # ------------------------------------------------------------------ leases

    def try_acquire_lease(self, name: str, holder: str, now: datetime, lease_s: float) -> bool:
        """Take or renew the lease ``name`` for ``holder`` until ``now + lease_s``.

        Succeeds when the lease is free, expired (``expires_at < now``) or already
        ``holder``'s; the check and the write are one UPDATE, so of several replicas
        racing for an expired lease exactly one wins. Returns whether ``holder`` holds it.
        """
        now = _aware(now)
        expires = now + timedelta(seconds=lease_s)
        leases = schema.leases
        with self._write() as connection:
            result = connection.execute(
                update(leases)
                .where(leases.c.name == name, or_(leases.c.expires_at < now, leases.c.holder == holder))
                .values(holder=holder, expires_at=expires)
            )
            if result.rowcount == 1:
                return True
            if connection.execute(select(leases.c.name).where(leases.c.name == name)).first() is not None:
                return False
        try:
            with self._write() as connection:
                connection.execute(insert(leases).values(name=name, holder=holder, expires_at=expires))
        except IntegrityError:  # another replica created it first
            return False
        return True

    def release_lease(self, name: str, holder: str) -> bool:
        """Give the lease up at once if ``holder`` has it; returns whether it did."""
        leases = schema.leases
        with self._write() as connection:
            result = connection.execute(
                delete(leases).where(leases.c.name == name, leases.c.holder == holder)
            )
            return bool(result.rowcount)

    def lease(self, name: str) -> tuple[str, datetime] | None:
        """(holder, expires_at) of the lease ``name``, or None when nobody has taken it."""
        with self.engine.connect() as connection:
            row = connection.execute(
                select(schema.leases.c.holder, schema.leases.c.expires_at).where(schema.leases.c.name == name)
            ).first()
        return None if row is None else (row.holder, _aware(row.expires_at))


def event_from_row(row: Any) -> Event:
    """An ``events`` row as an Event."""
    return Event(
        id=row.id,
        time=_aware(row.time),
        kind=row.kind,
        name=row.name,
        type=EventType(row.type),
        reason=row.reason,
        message=row.message,
    )


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# Metadata a writer cannot change: identity, and what the store itself keeps up to date.
_KEPT_BY_THE_STORE = ("uid", "created_at", "generation", "resource_version", "updated_at")


def _owned_by_users(doc: dict[str, Any]) -> Any:
    """What only the API writes (of an object's JSON document): spec, labels and the user's
    (non-system) annotations."""
    meta = doc["metadata"]
    return (doc.get("spec"), meta["labels"], split_annotations(meta["annotations"])[0])
