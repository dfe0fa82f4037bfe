"""API tokens: only a token's SHA-256 is stored, with its name and role."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from virtplane.store import schema, statements
from virtplane.store.database import Database, utcnow
from virtplane.store.errors import AlreadyExists


class Tokens(Database):
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
        with self.connect() as connection:
            row = connection.execute(statements.TOKEN_ROLE, {"b_sha256": _hash(token)}).first()
        return None if row is None else (row.name, row.role)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
