"""The statements of the store's hot paths, built once.

On SQLite, building a statement cost more than running it (a read 0.5 ms, of which the
query 0.02). Parameters are bound by name: ``b_kind`` and ``b_name`` (see ``key``) name
an object.

The few that run on every read and write are also compiled once for the engine's
dialect (``Compiled``, collected in ``Prepared``) and run on the DBAPI cursor of the
SQLAlchemy connection, inside its transaction: SQLAlchemy's per-execution work
(parameter processing, result wrapping, 20-40 µs a statement on SQLite) cost more than
the statements themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, Update, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

from virtplane.store import schema

_objects = schema.objects


def _by_key() -> tuple[Any, ...]:
    return (_objects.c.kind == bindparam("b_kind"), _objects.c.name == bindparam("b_name"))


def key(kind: str, name: str) -> dict[str, Any]:
    """The parameters that name one object."""
    return {"b_kind": kind, "b_name": name}


GET_BODY = select(_objects.c.body).where(*_by_key())
GET_VERSION = select(_objects.c.resource_version).where(*_by_key())
LOCKED_ROW = select(_objects.c.body, _objects.c.resource_version).where(*_by_key()).with_for_update()
UPDATE_OBJECT = (
    update(_objects)
    .where(*_by_key(), _objects.c.resource_version == bindparam("b_expected"))
    .values(
        resource_version=bindparam("b_revision"),
        generation=bindparam("b_generation"),
        body=bindparam("b_body"),
    )
)


def update_object_setting(fields: frozenset[str]) -> Update:
    """``UPDATE_OBJECT`` that also sets the field columns ``fields`` (each bound as ``b_<column>``):
    the ones whose value changed, so that the others' indexes are left alone."""
    return UPDATE_OBJECT.values({column: bindparam(f"b_{column}") for column in sorted(fields)})


DELETE_OBJECT = delete(_objects).where(*_by_key(), _objects.c.resource_version == bindparam("b_expected"))
INSERT_OBJECT = insert(_objects).values(
    kind=bindparam("b_kind"),
    name=bindparam("b_name"),
    uid=bindparam("b_uid"),
    resource_version=bindparam("b_revision"),
    generation=bindparam("b_generation"),
    body=bindparam("b_body"),
    **{column: bindparam(f"b_{column}") for column in schema.FIELD_PATHS},
)
GET_MANY = select(_objects.c.name, _objects.c.body).where(
    _objects.c.kind == bindparam("b_kind"), _objects.c.name.in_(bindparam("b_names", expanding=True))
)
GET_NAMES = select(_objects.c.name).where(
    _objects.c.kind == bindparam("b_kind"), _objects.c.name.in_(bindparam("b_names", expanding=True))
)
INSERT_CHANGE = (
    insert(schema.changes)
    .values(kind=bindparam("kind"), name=bindparam("name"), op=bindparam("op"))
    .returning(schema.changes.c.revision)
)
REVISION = select(func.max(schema.changes.c.revision))
CHANGES_SINCE = (
    select(schema.changes)
    .where(schema.changes.c.revision > bindparam("b_revision"))
    .order_by(schema.changes.c.revision)
    .limit(bindparam("b_limit"))
)
# every column but the id, each bound by its own name (one row per event: ``Compiled.many``)
INSERT_EVENTS = insert(schema.events).values(
    {column.name: bindparam(column.name) for column in schema.events.c if column.name != "id"}
)
TOKEN_BY_HASH = select(schema.tokens).where(schema.tokens.c.token_sha256 == bindparam("b_sha256"))


class Compiled:
    """A statement compiled once for a dialect and run on the DBAPI cursor.

    Only for statements whose result columns are plain strings and integers (the rows are
    the driver's tuples). A parameter whose type the dialect converts (an event's time on
    SQLite) goes through that type's own bind processor, as SQLAlchemy would.
    Errors are the driver's own, but for the one callers handle: a unique key taken (another
    replica created the object first) is SQLAlchemy's ``IntegrityError``, as elsewhere.
    """

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        self._integrity_error: type[Exception] = dialect.loaded_dbapi.IntegrityError
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        # positional paramstyles (SQLite's qmark) take the values in the statement's order
        self._order = tuple(compiled.positiontup or ()) if compiled.positional else None
        # values the statement fixes itself (SQLite's ``OFFSET 0`` of a LIMIT)
        self._fixed = {name: value for name, value in compiled.params.items() if value is not None}
        self._processors = {
            name: processor
            for name, bind in compiled.binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }

    def _values(self, params: Mapping[str, Any]) -> Any:
        if self._fixed:
            params = {**self._fixed, **params}
        if self._processors:
            params = {
                name: processor(params[name]) if (processor := self._processors.get(name)) else value
                for name, value in params.items()
            }
        return params if self._order is None else [params[name] for name in self._order]

    def _run(self, connection: Connection, params: Mapping[str, Any]) -> Any:
        cursor = connection.connection.cursor()
        values = self._values(params)
        try:
            cursor.execute(self.sql, values)
        except self._integrity_error as error:
            cursor.close()
            raise IntegrityError(self.sql, values, error) from error
        return cursor

    def many(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row (the driver's ``executemany``)."""
        cursor = connection.connection.cursor()
        try:
            cursor.executemany(self.sql, [self._values(row) for row in rows])
        finally:
            cursor.close()

    def first(self, connection: Connection, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        cursor = self._run(connection, params)
        try:
            row = cursor.fetchone()
            return None if row is None else tuple(row)
        finally:
            cursor.close()

    def all(self, connection: Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        cursor = self._run(connection, params)
        try:
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def rowcount(self, connection: Connection, params: Mapping[str, Any]) -> int:
        cursor = self._run(connection, params)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()


class Prepared:
    """The hot statements, compiled for one engine's dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.get_body = Compiled(GET_BODY, dialect)
        self.get_version = Compiled(GET_VERSION, dialect)
        self.insert_object = Compiled(INSERT_OBJECT, dialect)
        self.locked_row = Compiled(LOCKED_ROW, dialect)
        self._dialect = dialect
        self._updates: dict[frozenset[str], Compiled] = {}
        self.insert_change = Compiled(INSERT_CHANGE, dialect)
        self.revision = Compiled(REVISION, dialect)
        self.changes_since = Compiled(CHANGES_SINCE, dialect)
        self.insert_events = Compiled(INSERT_EVENTS, dialect)

    def update_object(self, fields: frozenset[str]) -> Compiled:
        """The UPDATE of an object that also sets the field columns ``fields`` (compiled on first
        use: one statement for each set of changed fields)."""
        compiled = self._updates.get(fields)
        if compiled is None:
            compiled = self._updates[fields] = Compiled(update_object_setting(fields), self._dialect)
        return compiled
