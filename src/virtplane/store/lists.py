"""Paged, filtered lists and the reads a watch makes, over the indexes of migrations 0002 and 0004.

A page is a range of one kind in name order (``name > after``), so an object that
exists from the first page to the last is on exactly one page, whatever changes in
between. Selectors become SQL: a field is an indexed column (``schema.FIELD_PATHS``), a label a
lookup in ``object_labels`` (an uncorrelated ``IN``, which the database evaluates
once per query rather than once per row). A page costs about its own size, not the
size of the kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, not_, or_, select, true

from virtplane.domain.resources import Event
from virtplane.domain.selectors import SELECTABLE_FIELDS, Operator, Requirement, Selector
from virtplane.store import schema
from virtplane.store.changes import Change
from virtplane.store.events import event_from_row
from virtplane.store.store import Store

__all__ = [
    "Current",
    "Page",
    "current_objects",
    "events_after",
    "events_before",
    "kind_changes",
    "last_event_id",
    "list_page",
    "matching_names",
]

_objects = schema.objects
_labels = schema.object_labels

FIELD_COLUMNS = {"metadata.name": _objects.c.name} | {
    ".".join(path): _objects.c[column] for column, path in schema.FIELD_PATHS.items()
}
assert set(FIELD_COLUMNS) == set(SELECTABLE_FIELDS), "every selectable field needs its column"

NO_SELECTOR = Selector()


@dataclass(frozen=True)
class Page:
    bodies: list[str]
    """The objects' stored JSON, in name order."""
    last_name: str | None
    """Where the next page starts (after this name); None when this is the last page."""


@dataclass(frozen=True)
class Current:
    body: str
    matches: bool
    """Whether the object matches the selectors it was read with."""


def _label_clause(kind: str, requirement: Requirement) -> ColumnElement[bool]:
    names = select(_labels.c.name).where(_labels.c.kind == kind, _labels.c.key == requirement.key)
    if requirement.values:
        values = list(requirement.values)
        names = names.where(
            _labels.c.value_prefix.in_([v[: schema.LABEL_PREFIX] for v in values]),
            _labels.c.value.in_(values),
        )
    member = _objects.c.name.in_(names)
    return not_(member) if requirement.operator.negative else member


def _field_clause(requirement: Requirement) -> ColumnElement[bool]:
    column = FIELD_COLUMNS[requirement.key]
    value = requirement.values[0]
    # an empty value is a field that is not set (K8s: spec.nodeName= selects unscheduled pods)
    equal = or_(column.is_(None), column == "") if value == "" else column == value
    if requirement.operator is Operator.EQUALS:
        return equal
    return or_(column.is_(None), column != value) if value else and_(column.is_not(None), column != "")


def selection(kind: str, labels: Selector, fields: Selector) -> list[ColumnElement[bool]]:
    """The WHERE clauses (besides the kind) of objects of ``kind`` matching both selectors."""
    return [_label_clause(kind, r) for r in labels.requirements] + [
        _field_clause(r) for r in fields.requirements
    ]


def list_page(
    store: Store,
    kind: str,
    *,
    limit: int,
    after: str = "",
    labels: Selector = NO_SELECTOR,
    fields: Selector = NO_SELECTOR,
) -> Page:
    """Up to ``limit`` objects of ``kind`` named after ``after`` that match, in name order."""
    query = (
        select(_objects.c.name, _objects.c.body)
        .where(_objects.c.kind == kind, _objects.c.name > after, *selection(kind, labels, fields))
        .order_by(_objects.c.name)
        .limit(limit + 1)
    )
    with store.connect() as connection:
        rows = connection.execute(query).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return Page([row.body for row in rows], rows[-1].name if more and rows else None)


def matching_names(store: Store, kind: str, *, labels: Selector, fields: Selector) -> list[str]:
    """The names of every object of ``kind`` that matches, in name order (for actions on a selection)."""
    query = (
        select(_objects.c.name)
        .where(_objects.c.kind == kind, *selection(kind, labels, fields))
        .order_by(_objects.c.name)
    )
    with store.connect() as connection:
        return list(connection.execute(query).scalars())


def current_objects(
    store: Store,
    kind: str,
    names: Sequence[str],
    *,
    labels: Selector = NO_SELECTOR,
    fields: Selector = NO_SELECTOR,
) -> dict[str, Current]:
    """The objects of ``names`` that exist now, each with whether it matches the selectors."""
    clauses = selection(kind, labels, fields)
    matches = and_(*clauses) if clauses else true()
    found: dict[str, Current] = {}
    unique = sorted(set(names))
    with store.connect() as connection:
        for start in range(0, len(unique), 500):
            rows = connection.execute(
                select(_objects.c.name, _objects.c.body, matches.label("matches")).where(
                    _objects.c.kind == kind, _objects.c.name.in_(unique[start : start + 500])
                )
            ).all()
            for row in rows:
                found[row.name] = Current(row.body, bool(row.matches))
    return found


def kind_changes(store: Store, kind: str, *, after: int, upto: int, limit: int) -> list[Change]:
    """Changes of ``kind`` with a revision in (after, upto], oldest first, at most ``limit``."""
    changes = schema.changes
    with store.connect() as connection:
        rows = connection.execute(
            select(changes)
            .where(changes.c.kind == kind, changes.c.revision > after, changes.c.revision <= upto)
            .order_by(changes.c.revision)
            .limit(limit)
        ).all()
    return [Change(row.revision, row.kind, row.name, row.op) for row in rows]


def _event_query(kind: str | None, name: str | None) -> Select[Any]:
    query = select(schema.events)
    if kind:
        query = query.where(schema.events.c.kind == kind)
    if name:
        query = query.where(schema.events.c.name == name)
    return query


def events_before(
    store: Store,
    *,
    before: int | None,
    limit: int,
    after: int = 0,
    kind: str | None = None,
    name: str | None = None,
) -> tuple[list[Event], bool]:
    """The newest ``limit`` events with an id below ``before`` (None: all) and above ``after``,
    oldest first; and whether older ones remain."""
    query = _event_query(kind, name).where(schema.events.c.id > after)
    if before is not None:
        query = query.where(schema.events.c.id < before)
    query = query.order_by(schema.events.c.id.desc()).limit(limit + 1)
    with store.connect() as connection:
        rows = connection.execute(query).all()
    return [event_from_row(row) for row in reversed(rows[:limit])], len(rows) > limit


def events_after(
    store: Store, *, after: int, limit: int, kind: str | None = None, name: str | None = None
) -> list[Event]:
    """Events with an id above ``after``, oldest first, at most ``limit``."""
    query = (
        _event_query(kind, name).where(schema.events.c.id > after).order_by(schema.events.c.id).limit(limit)
    )
    with store.connect() as connection:
        rows = connection.execute(query).all()
    return [event_from_row(row) for row in rows]


def last_event_id(store: Store) -> int:
    """The id of the newest event (0 when there is none); events are numbered in commit order."""
    with store.connect() as connection:
        value = connection.execute(select(schema.events.c.id).order_by(schema.events.c.id.desc()).limit(1))
        return int(value.scalar_one_or_none() or 0)
