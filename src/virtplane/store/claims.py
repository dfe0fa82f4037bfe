"""Claims: values that one object holds alone (a NIC's address on a network, a MAC).

They are written inside the transaction that writes their holder (``Store.create``
/ ``Store.update`` with ``claims=``), so an object and what it holds are stored
together or not at all; the table's primary key (scope, value) makes two holders
impossible even between replicas that race. The holder's physical deletion
releases them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, and_, delete, insert, select, tuple_
from sqlalchemy.exc import IntegrityError

from virtplane.domain.ipam import Claim, claim_reason
from virtplane.store import schema
from virtplane.store.errors import StoreError


@dataclass(frozen=True)
class Holder:
    kind: str
    name: str
    uid: str


class ClaimTaken(StoreError):
    """A value is held by another object; nothing of the write was stored."""

    def __init__(self, claim: Claim, holder: Holder | None) -> None:
        by = f"{holder.kind} {holder.name}" if holder else "another object"
        super().__init__(f"{claim.value} ({claim.scope}) is held by {by}")
        self.claim = claim
        self.holder = holder
        self.reason = claim_reason(claim)


def holders(connection: Connection, wanted: Sequence[Claim]) -> dict[Claim, Holder]:
    """Who holds each of ``wanted`` that is held."""
    if not wanted:
        return {}
    c = schema.claims.c
    rows = connection.execute(
        select(c.scope, c.value, c.owner_kind, c.owner_name, c.owner_uid).where(
            tuple_(c.scope, c.value).in_([(w.scope, w.value) for w in wanted])
        )
    ).all()
    return {Claim(r.scope, r.value): Holder(r.owner_kind, r.owner_name, r.owner_uid) for r in rows}


def replace_claims(connection: Connection, owner: Holder, wanted: Sequence[Claim]) -> None:
    """Make ``owner``'s claims exactly ``wanted``; ``ClaimTaken`` when one is another's."""
    c = schema.claims.c
    mine = {
        Claim(r.scope, r.value)
        for r in connection.execute(select(c.scope, c.value).where(c.owner_uid == owner.uid)).all()
    }
    keep = set(wanted)
    for claim in sorted(mine - keep):
        connection.execute(
            delete(schema.claims).where(
                and_(c.owner_uid == owner.uid, c.scope == claim.scope, c.value == claim.value)
            )
        )
    new = sorted(keep - mine)
    for claim, holder in holders(connection, new).items():
        raise ClaimTaken(claim, holder)
    for claim in new:
        try:
            connection.execute(
                insert(schema.claims).values(
                    scope=claim.scope,
                    value=claim.value,
                    owner_kind=owner.kind,
                    owner_name=owner.name,
                    owner_uid=owner.uid,
                )
            )
        except IntegrityError as e:  # another replica took it since we looked
            raise ClaimTaken(claim, None) from e


def release(connection: Connection, owner_uid: str) -> None:
    connection.execute(delete(schema.claims).where(schema.claims.c.owner_uid == owner_uid))


def list_claims(connection: Connection, scope_prefix: str) -> list[tuple[Claim, Holder]]:
    c = schema.claims.c
    rows = connection.execute(
        select(c.scope, c.value, c.owner_kind, c.owner_name, c.owner_uid)
        .where(c.scope.startswith(scope_prefix, autoescape=True))
        .order_by(c.scope, c.value)
    ).all()
    return [(Claim(r.scope, r.value), Holder(r.owner_kind, r.owner_name, r.owner_uid)) for r in rows]
