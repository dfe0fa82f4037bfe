"""Stored bodies in the current schema, so that lists can serve them as they are.

A list page answers with the stored JSON bodies joined, without validating and
re-serialising each object (at 500 objects a page that was most of the request). That
is only right while every stored body is what the current models would write. Bodies
are always written by ``model_dump_json`` of the current code, so they can fall behind
only when the code's models change (a field added with a default, a field renamed
with a migration of its own...). For that, ``normalize_bodies`` remembers a
fingerprint of each kind's JSON schema (a ``feed_state`` row ``schema:<Kind>``), and
when the code's fingerprint differs it rewrites every body of that kind through the
current model. ``Store.migrate`` runs it inside the upgrade's one transaction
(``virtplane.store.upgrade``), so a server never serves before it has, and an upgrade
that fails half-way leaves every body as it was.

The rewrite changes no object: the same content, in the current shape; so it draws no
revision and wakes nobody. A body the current model cannot read at all is quarantined
(``virtplane.store.quarantine``): named in the log with the field and pydantic's message,
moved out of ``objects``, and the rest is served.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError
from sqlalchemy import Connection, bindparam, insert, select, update

from virtplane.domain.resources import KINDS, Resource
from virtplane.store import schema
from virtplane.store.quarantine import Unreadable, validation_reason

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


@dataclass
class Normalised:
    """What ``normalize_bodies`` did: bodies rewritten by kind, and the ones it could not read."""

    rewritten: dict[str, int] = field(default_factory=dict)
    unreadable: list[Unreadable] = field(default_factory=list)

    def changed(self) -> bool:
        return bool(self.rewritten or self.unreadable)


def stale_kinds(connection: Connection, kinds: Iterable[type[Resource]] = KINDS) -> list[type[Resource]]:
    """The kinds whose bodies were written under another schema than the code's."""
    known = {row.name: row.revision for row in connection.execute(select(_state.c.name, _state.c.revision))}
    return [cls for cls in kinds if known.get(_state_name(cls)) != schema_fingerprint(cls)]


def normalize_bodies(
    connection: Connection, kinds: Iterable[type[Resource]] = KINDS, *, every_kind: bool = False
) -> Normalised:
    """In ``connection``'s transaction: rewrite the bodies of every kind whose schema changed since
    they were written (with ``every_kind``, read every kind's: an upgrade reads them all once),
    and record each kind's fingerprint. Bodies that cannot be read are listed, not touched."""
    kinds = list(kinds)
    stale = set(stale_kinds(connection, kinds))
    done = Normalised()
    for cls in kinds:
        if cls not in stale and not every_kind:
            continue
        rewritten = _rewrite(connection, cls, done.unreadable)
        if rewritten:
            done.rewritten[cls.KIND] = rewritten
        if cls in stale:
            _record_fingerprint(connection, cls)
    return done


def _record_fingerprint(connection: Connection, cls: type[Resource]) -> None:
    name = _state_name(cls)
    updated = connection.execute(
        update(_state).where(_state.c.name == name).values(revision=schema_fingerprint(cls))
    )
    if updated.rowcount == 0:
        connection.execute(insert(_state).values(name=name, revision=schema_fingerprint(cls)))


def _rewrite(connection: Connection, cls: type[Resource], unreadable: list[Unreadable]) -> int:
    """Every body of ``cls`` through the current model, read a page at a time; how many changed."""
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
        rows = connection.execute(
            select(_objects.c.name, _objects.c.uid, _objects.c.resource_version, _objects.c.body)
            .where(_objects.c.kind == cls.KIND, _objects.c.name > after)
            .order_by(_objects.c.name)
            .limit(_BATCH)
        ).all()
        if not rows:
            return changed
        after = rows[-1].name
        updates = []
        for row in rows:
            try:
                body = cls.model_validate_json(row.body).model_dump_json()
            except ValidationError as error:
                unreadable.append(Unreadable(cls.KIND, row.name, row.uid, row.body, validation_reason(error)))
                continue
            if body != row.body:
                fields = {
                    f"b_{column}": value for column, value in schema.field_values(json.loads(body)).items()
                }
                updates.append(
                    {"b_name": row.name, "b_version": row.resource_version, "b_body": body, **fields}
                )
        if updates:
            connection.execute(rewrite, updates)
            changed += len(updates)


__all__ = ["Normalised", "normalize_bodies", "schema_fingerprint", "stale_kinds"]
