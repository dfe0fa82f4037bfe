"""API tokens: only a token's SHA-256 is stored, with its name, role, owner and lifecycle.

Why a fast hash and not bcrypt: a token is 256 random bits (``secrets.token_urlsafe(32)``),
so its SHA-256 cannot be reversed by guessing, salt or no salt; a slow hash defends
low-entropy passwords, and here it would only cost every uncached request tens of
milliseconds of CPU on the loop the controllers share (any client could spend it with
made-up tokens), and a salted hash cannot be looked up by its value.

A token's name is its id (listed, revoked and audited by it). Revoking keeps the row, so
that the token's next request is refused with the reason, and its audit records still name it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from virtplane.store import schema, statements
from virtplane.store.database import Database, aware
from virtplane.store.errors import AlreadyExists, NotFound

USER_OWNER_PREFIXES = ("ldap:", "oidc:")
"""A token whose owner is ``ldap:alice`` was made by alice's login: it belongs to a user. Any
other owner is a service account's (a token made with ``POST /v1/tokens``)."""


@dataclass(frozen=True)
class TokenInfo:
    """What is known of a token, never the token itself."""

    name: str
    role: str
    owner: str | None
    description: str
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    def refusal(self, now: datetime) -> tuple[str, str] | None:
        """(reason, message) if the token may not be used at ``now``; None if it may."""
        if self.revoked_at is not None:
            by = f" by {self.revoked_by}" if self.revoked_by else ""
            return "TokenRevoked", f"the token {self.name} was revoked{by} at {self.revoked_at.isoformat()}"
        if self.expires_at is not None and self.expires_at <= now:
            return "TokenExpired", f"the token {self.name} expired at {self.expires_at.isoformat()}"
        return None

    @property
    def owner_kind(self) -> str:
        """``user`` (a login's session) or ``service-account``."""
        return "user" if (self.owner or "").startswith(USER_OWNER_PREFIXES) else "service-account"

    def document(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "name": self.name,
            "role": self.role,
            "owner": self.owner,
            "owner_kind": self.owner_kind,
            "description": self.description,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "last_used_at": iso(self.last_used_at),
            "revoked_at": iso(self.revoked_at),
            "revoked_by": self.revoked_by,
        }


def _info(row: Any) -> TokenInfo:
    def when(value: datetime | None) -> datetime | None:
        return None if value is None else aware(value)

    return TokenInfo(
        name=row.name,
        role=row.role,
        owner=row.owner,
        description=row.description or "",
        created_at=aware(row.created_at),
        expires_at=when(row.expires_at),
        last_used_at=when(row.last_used_at),
        revoked_at=when(row.revoked_at),
        revoked_by=row.revoked_by,
    )


class Tokens(Database):
    def create_token(
        self,
        name: str,
        role: str,
        token: str | None = None,
        *,
        owner: str | None = None,
        description: str = "",
        expires_at: datetime | None = None,
    ) -> str:
        """Store a new API token (only its hash is kept) and return it; its owner is ``name``
        unless given."""
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
                        token_sha256=token_hash(token),
                        name=name,
                        role=role,
                        created_at=self.clock(),
                        owner=owner or name,
                        description=description,
                        expires_at=expires_at,
                    )
                )
        except IntegrityError as e:  # created by another replica since we looked
            raise AlreadyExists("Token", name) from e
        return token

    def token_info(self, token: str) -> TokenInfo | None:
        """The token's record (revoked and expired ones too), or None if it is unknown."""
        with self.connect() as connection:
            row = connection.execute(statements.TOKEN_BY_HASH, {"b_sha256": token_hash(token)}).first()
        return None if row is None else _info(row)

    def token_role(self, token: str) -> tuple[str, str] | None:
        """(name, role) of a token that may be used now, or None (unknown, revoked or expired)."""
        info = self.token_info(token)
        if info is None or info.refusal(self.clock()) is not None:
            return None
        return info.name, info.role

    def tokens(self) -> list[TokenInfo]:
        """Every token, by name (revoked ones too)."""
        with self.connect() as connection:
            rows = connection.execute(select(schema.tokens).order_by(schema.tokens.c.name)).all()
        return [_info(row) for row in rows]

    def token_named(self, name: str) -> TokenInfo:
        with self.connect() as connection:
            row = connection.execute(select(schema.tokens).where(schema.tokens.c.name == name)).first()
        if row is None:
            raise NotFound("Token", name)
        return _info(row)

    def revoke_token(self, name: str, *, by: str) -> TokenInfo:
        """Revoke the token ``name`` (again: no change); NotFound if there is none."""
        table = schema.tokens
        with self._write() as connection:
            connection.execute(
                update(table)
                .where(table.c.name == name, table.c.revoked_at.is_(None))
                .values(revoked_at=self.clock(), revoked_by=by)
            )
        return self.token_named(name)

    def prune_tokens(self, *, dead_for_s: float) -> int:
        """Delete the tokens that expired or were revoked more than ``dead_for_s`` ago; how many
        went. Each login makes a token, so without this the table grows by one a login for ever;
        until then a dead token's use is refused with its reason, after it as an unknown token
        (the audit keeps its name as text)."""
        cutoff = self.clock() - timedelta(seconds=dead_for_s)
        table = schema.tokens
        with self._write() as connection:
            result = connection.execute(
                delete(table).where(or_(table.c.expires_at < cutoff, table.c.revoked_at < cutoff))
            )
        return int(result.rowcount or 0)

    def token_used(self, name: str, at: datetime) -> None:
        """Record the token's last use (callers write it at most once a minute per token)."""
        table = schema.tokens
        with self._write() as connection:
            connection.execute(update(table).where(table.c.name == name).values(last_used_at=at))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
