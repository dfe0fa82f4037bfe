"""Leases: a named lock with an expiry that one replica holds at a time (leader election)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from virtplane.store import schema
from virtplane.store.database import Database, aware


class Leases(Database):
    def try_acquire_lease(self, name: str, holder: str, now: datetime, lease_s: float) -> bool:
        """Take or renew the lease ``name`` for ``holder`` until ``now + lease_s``.

        Succeeds when the lease is free, expired (``expires_at < now``) or already
        ``holder``'s; the check and the write are one UPDATE, so of several replicas
        racing for an expired lease exactly one wins. Returns whether ``holder`` holds it.
        """
        now = aware(now)
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
        return None if row is None else (row.holder, aware(row.expires_at))
