"""Reading objects: one by name, several by names, a whole kind, its names and count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sqlalchemy import func, select

from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Resource
from virtplane.store import claims as claim_table
from virtplane.store import schema, statements
from virtplane.store.claims import Holder
from virtplane.store.database import Database
from virtplane.store.errors import NotFound

R = TypeVar("R", bound=Resource)


class ObjectReads(Database):
    def get(self, cls: type[R], name: str) -> R:
        with self.connect() as connection:
            row = self.prepared.get_body.first(connection, statements.key(cls.KIND, name))
        if row is None:
            raise NotFound(cls.KIND, name)
        return cls.model_validate_json(row[0])

    def find(self, cls: type[R], name: str) -> R | None:
        try:
            return self.get(cls, name)
        except NotFound:
            return None

    def list_objects(self, cls: type[R]) -> list[R]:
        with self.connect() as connection:
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
        with self.connect() as connection:
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                rows = connection.execute(statements.GET_MANY, {"b_kind": cls.KIND, "b_names": chunk}).all()
                for row in rows:
                    found[row.name] = cls.model_validate_json(row.body)
        return found

    def names(self, kind: str) -> list[str]:
        with self.connect() as connection:
            return list(
                connection.execute(
                    select(schema.objects.c.name)
                    .where(schema.objects.c.kind == kind)
                    .order_by(schema.objects.c.name)
                ).scalars()
            )

    def count(self, kind: str) -> int:
        with self.connect() as connection:
            return int(
                connection.execute(
                    select(func.count()).select_from(schema.objects).where(schema.objects.c.kind == kind)
                ).scalar_one()
            )

    def claims(self, scope_prefix: str) -> list[tuple[Claim, Holder]]:
        """The claims whose scope starts with ``scope_prefix``, with their holders."""
        with self.connect() as connection:
            return claim_table.list_claims(connection, scope_prefix)
