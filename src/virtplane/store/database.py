"""The database under the store: one engine, and the rules every write transaction keeps.

The same code runs on SQLite (the embedded default, WAL mode) and PostgreSQL. Every
write is one short transaction that (1) appends a row to ``changes``, whose id is the
new store-wide revision, and (2) writes the object with ``resource_version`` = that
revision, guarded by the version the caller read. A stale write raises ``Conflict``;
nothing is ever half-written.

Several replicas may share one PostgreSQL database, so two rules hold under real
concurrency there:

- The version check cannot be raced: a writer locks the object's row (``SELECT ...
  FOR UPDATE``) before comparing versions, and the write itself is an ``UPDATE ...
  WHERE resource_version = <the version it read>`` whose row count is checked
  (``virtplane.store.writes``).
- Revisions become visible in the order they were handed out. A writer takes a
  transaction-scoped advisory lock just before it draws the next revision and holds it
  until it commits, so revision N+1 can only be drawn after N committed (or rolled
  back). A reader of ``changes_since`` therefore never sees a revision while a smaller
  one is still in flight, and a watcher that remembers the highest revision it saw
  misses nothing. Events get the same treatment under their own lock, for readers
  that follow them by id. On SQLite the database's single writer gives both for free:
  a write transaction begins IMMEDIATE, so it holds the file's write lock from its first
  read, also against other processes (``serve --workers``).

Calls are synchronous and short. Async code calls them directly (SQLite answers in
well under a millisecond); FastAPI runs sync routes in its thread pool. On SQLite the
store keeps its connections open (``HeldConnections``) instead of taking one from
SQLAlchemy's pool per call: the pool's checkout, reset and checkin cost about as much as
reading one object by name.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

from virtplane.domain.resources import EventType
from virtplane.store import statements
from virtplane.store.errors import StoreError
from virtplane.store.sealing import Keyring

ChangeListener = Callable[[int], None]
"""Called after each commit with the new revision; from whichever thread wrote."""

EventRecord = tuple[str, str, str, str, EventType]
"""An event to append: (kind, name, reason, message, type)."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite hands back naive UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Keys of the transaction-scoped PostgreSQL advisory locks (any fixed 64-bit numbers).
LOCK_REVISIONS = 0x7670_0001  # drawing a revision and committing it
LOCK_EVENTS = 0x7670_0002  # drawing an event id and committing it
LOCK_MIGRATE = 0x7670_0003  # running the Alembic migrations


def _sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    # Before anything creates the file's first page: a new database frees the pages that
    # retention empties (``reclaim_space``); an existing one switches at its next VACUUM
    # (``use_incremental_vacuum``). Set after journal_mode, it would not take.
    # Only on an empty file: on an existing one the pragma writes its header even where it
    # changes nothing, and a store opened only to be refused (newer data) must stay untouched.
    cursor.execute("PRAGMA page_count")
    if cursor.fetchone()[0] == 0:
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode stays consistent after a crash of the process; only an OS
    # crash can lose the last transactions. busy_timeout covers other processes.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


_INCREMENTAL = 2  # PRAGMA auto_vacuum: 0 none, 1 full, 2 incremental


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


class HeldConnections:
    """SQLite's connections, kept open: one per concurrent user, reused last in, first out.

    SQLAlchemy's pool checks a connection out, resets it (a ROLLBACK) and checks it in again
    on every ``engine.connect()``: 10-13 us, more than a read by name on SQLite costs itself
    (``bench/``). A SQLite connection is a handle on a file, and one that is not in the
    middle of a statement holds no lock and no snapshot, so keeping it open costs nothing.
    A connection is handed to one caller at a time (``list.pop`` and ``append`` are atomic)
    and given back with SQLAlchemy's transaction ended. After a ``StoreError`` (a lost race,
    a missing object: raised by the store itself, every statement's cursor closed) it is
    reused; after anything else it is closed, so that no half-read result keeps a snapshot
    of the file open on a connection that serves the next read. SQLAlchemy's own pool is
    ``NullPool`` beside it: the engine opens and closes, this keeps.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._free: list[Connection] = []
        self._current: set[Connection] = set()  # opened since the last ``close``
        self._lock = threading.Lock()

    @contextmanager
    def take(self) -> Iterator[Connection]:
        try:
            connection = self._free.pop()
        except IndexError:
            connection = self._engine.connect()
            with self._lock:
                self._current.add(connection)
        try:
            yield connection
        except StoreError:
            self._give_back(connection)
            raise
        except BaseException:
            self._discard(connection)
            raise
        self._give_back(connection)

    def _give_back(self, connection: Connection) -> None:
        # a read through SQLAlchemy's execute began its (SQLite: empty) transaction; end it
        if connection.in_transaction():
            connection.rollback()
        if connection in self._current:
            self._free.append(connection)
        else:  # in use when the store was closed: closed now that its caller is done
            connection.close()

    def _discard(self, connection: Connection) -> None:
        with self._lock:
            self._current.discard(connection)
        connection.close()

    def close(self) -> None:
        """Close the connections not in use now, and each one in use when its caller is done.
        A later call opens a new one (a store is usable again after ``close``)."""
        with self._lock:
            free, self._free = self._free, []
            self._current.clear()
        for connection in free:
            connection.close()


class Database:
    """The engine, the write transaction, and the listeners told of each commit."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        clock: Callable[[], datetime] = utcnow,
        keyring: Keyring | None = None,
    ) -> None:
        self.url = url
        self.clock = clock
        """Now, in UTC: the time of events, and what retention counts ages from (tests move it)."""
        self.keyring = keyring
        """Seals Secrets' passwords (``sealing``); without one, a Secret with a password is refused."""
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {"echo": echo}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False}
            # HeldConnections is the pool: a bounded one beside it would count every held
            # connection as checked out for good, and make the 16th concurrent reader wait.
            kwargs["poolclass"] = NullPool
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(url, **kwargs)
        self.prepared = statements.Prepared(self.engine.dialect)
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        # SQLite allows one writer; serialising writers inside the process avoids
        # SQLITE_BUSY churn between API threads and the controllers.
        self._write_lock = threading.Lock() if self.is_sqlite else None
        # PostgreSQL keeps the pool: its connections are sockets that can break (pre-ping).
        self._held = HeldConnections(self.engine) if self.is_sqlite else None
        self._listeners: list[ChangeListener] = []

    def close(self) -> None:
        if self._held is not None:
            self._held.close()
        self.engine.dispose()

    def connect(self) -> contextlib.AbstractContextManager[Connection]:
        """A connection for reads, as ``engine.connect()`` (on SQLite, one kept open)."""
        if self._held is not None:
            return self._held.take()
        return self.engine.connect()

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
            with self.connect() as connection, connection.begin():
                if self._write_lock is not None:
                    # The write lock from the first statement: a write reads (the version it
                    # checks) before it writes, and a deferred transaction would read before it
                    # locks. Across processes (``serve --workers``) another one's commit could
                    # land in between; IMMEDIATE waits for it (busy_timeout) and reads after it.
                    connection.exec_driver_sql("BEGIN IMMEDIATE")
                yield connection
        finally:
            if lock is not None:
                lock.release()

    def reclaim_space(self, pages_per_step: int = 1000) -> int:
        """SQLite: hand the pages that deletions freed back to the file system, a step per
        transaction so that no writer waits long; how many pages. (PostgreSQL's autovacuum
        makes deleted rows' space reusable by itself: nothing to do there.)"""
        if not self.is_sqlite or not self.uses_incremental_vacuum():
            return 0
        freed = 0
        free = self._pragma("freelist_count")
        while free > 0:
            with self._write() as connection:
                raw = connection.connection.dbapi_connection
                assert raw is not None
                # executescript steps the pragma to its end; a cursor's execute frees one page
                raw.executescript(f"PRAGMA incremental_vacuum({int(pages_per_step)})")
            left = self._pragma("freelist_count")
            if left >= free:  # nothing more to free (another writer's pages meanwhile)
                break
            freed, free = freed + free - left, left
        return freed

    def use_incremental_vacuum(self) -> bool:
        """SQLite: make a database created without incremental auto-vacuum (before retention
        existed) use it, by the one full VACUUM that switches it; True if it ran. It rewrites
        the whole file and holds the writer meanwhile: run it at start, before serving."""
        if not self.is_sqlite or self.uses_incremental_vacuum():
            return False
        with self._write() as connection:
            raw = connection.connection.dbapi_connection
            assert raw is not None
            raw.executescript("PRAGMA auto_vacuum=INCREMENTAL; VACUUM")
        return True

    def uses_incremental_vacuum(self) -> bool:
        return self.is_sqlite and self._pragma("auto_vacuum") == _INCREMENTAL

    def size_bytes(self) -> int:
        """SQLite: the database's size in pages (the file, once the WAL is checkpointed)."""
        return self._pragma("page_count") * self._pragma("page_size") if self.is_sqlite else 0

    def _pragma(self, name: str) -> int:
        with self.connect() as connection:
            return int(connection.exec_driver_sql(f"PRAGMA {name}").scalar_one())

    def announce(self, revision: int) -> None:
        """Tell the listeners of a commit another process made (``runtime.other_writers``)."""
        self._notify(revision)

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
        self._advisory_lock(connection, LOCK_REVISIONS)
        row = self.prepared.insert_change.first(connection, {"kind": kind, "name": name, "op": op})
        assert row is not None
        return int(row[0])

    def _append_events(self, connection: Connection, items: Sequence[EventRecord]) -> None:
        """Append events inside a writer's transaction (before its revision is drawn: the lock
        order is always events, then revisions)."""
        if not items:
            return
        self._advisory_lock(connection, LOCK_EVENTS)
        now = self.clock()
        self.prepared.insert_events.many(
            connection,
            [
                {"time": now, "kind": k, "name": n, "reason": r, "message": m, "type": t.value}
                for k, n, r, m, t in items
            ],
        )
