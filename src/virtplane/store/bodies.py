"""Stored bodies in the current schema, so that lists can serve them as they are.

A list page answers with the stored JSON bodies joined, without validating and
re-serialising each object (at 500 objects a page that was most of the request). That
is only right while every stored body is what the current models would write. Bodies
are always written by ``model_dump_json`` of the current code, so they can fall behind
only when the code's models change (a field added with a default, a field renamed
with a migration of its own...). For that, ``normalize_bodies`` remembers a
fingerprint of each kind's JSON schema (a ``feed_state`` row ``schema:<Kind>``), and
when the code's fingerprint differs it rewrites every body of that kind through the
current model; ``Store.migrate`` runs it, so a server never serves before it has.

The rewrite changes no object: the same content, in the current shape; so it draws no
revision and wakes nobody. A body a newer write replaced meanwhile is left alone (it
is in the current shape already).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from virtplane.domain.resources import KINDS, Resource
from virtplane.store import schema

if TYPE_CHECKING:
    from virtplane.store.database import Database

_BATCH = 500
_objects = schema.objects
_state = schema.feed_state


@functools.cache
def schema_fingerprint(cls: type[Resource]) -> int:
    """A number that changes when ``cls``'s JSON shape does (31 bits: ``feed_state`` holds an INTEGER)."""
    text = json.dumps(cls.model_json_schema(mode="serialization"), sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFF_FFFF


def _state_name(cls: type[Resource]) -> str:
    return f"schema:{cls.KIND}"


def normalize_bodies(store: Database, kinds: Iterable[type[Resource]] = KINDS) -> dict[str, int]:
    """Rewrite the bodies of every kind whose schema changed since they were written; how many, by kind."""
    rewritten: dict[str, int] = {}
    with store.engine.connect() as connection:
        known = {
            row.name: row.revision for row in connection.execute(select(_state.c.name, _state.c.revision))
        }
    for cls in kinds:
        fingerprint = schema_fingerprint(cls)
        recorded = known.get(_state_name(cls))
        if recorded == fingerprint:
            continue
        rewritten[cls.KIND] = _rewrite(store, cls)
        try:
            with store._write() as connection:  # the store's write lock: SQLite has one writer
                if recorded is None:
                    connection.execute(insert(_state).values(name=_state_name(cls), revision=fingerprint))
                else:
                    connection.execute(
                        update(_state).where(_state.c.name == _state_name(cls)).values(revision=fingerprint)
                    )
        except IntegrityError:  # another replica, starting at the same time, recorded it first
            pass
    return rewritten


def _rewrite(store: Database, cls: type[Resource]) -> int:
    """Every body of ``cls`` through the current model, a batch per transaction; how many changed."""
    changed = 0
    after = ""
    rewrite = (
        update(_objects)
        .where(
            _objects.c.kind == cls.KIND,
            _objects.c.name == bindparam("b_name"),
            _objects.c.resource_version == bindparam("b_version"),
        )
        .values(
            body=bindparam("b_body"), **{column: bindparam(f"b_{column}") for column in schema.FIELD_PATHS}
        )
    )
    while True:
        with store.engine.connect() as connection:
            rows = connection.execute(
                select(_objects.c.name, _objects.c.resource_version, _objects.c.body)
                .where(_objects.c.kind == cls.KIND, _objects.c.name > after)
                .order_by(_objects.c.name)
                .limit(_BATCH)
            ).all()
        if not rows:
            return changed
        after = rows[-1].name
        updates = []
        for row in rows:
            body = cls.model_validate_json(row.body).model_dump_json()
            if body != row.body:
                fields = {
                    f"b_{column}": value for column, value in schema.field_values(json.loads(body)).items()
                }
                updates.append(
                    {"b_name": row.name, "b_version": row.resource_version, "b_body": body, **fields}
                )
        if updates:
            with store._write() as connection:
                connection.execute(rewrite, updates)
            changed += len(updates)


__all__ = ["normalize_bodies", "schema_fingerprint"]
