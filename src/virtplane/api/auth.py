"""Bearer-token authentication and the three roles: viewer < operator < admin."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from fastapi import Request

from virtplane.api.errors import ApiError
from virtplane.api.limits import check_write
from virtplane.api.token_cache import BoundedCache
from virtplane.store.store import Store


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role

    def can(self, needed: Role) -> bool:
        return _RANK[self.role] >= _RANK[needed]


MAX_TOKEN_CHARS = 256
"""Longer tokens are refused before any look-up (ours are 46 characters)."""


class TokenCache:
    """Token → principal of the tokens found, cached briefly so that a busy API does not
    hash-and-query per call; bounded (``BoundedCache``), and never holding an unknown token."""

    def __init__(self, store: Store, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self._store = store
        self.entries: BoundedCache[Principal] = BoundedCache(
            max_entries=max_entries, max_bytes=max_entries * (MAX_TOKEN_CHARS + 200), ttl_s=ttl_s
        )

    def lookup(self, token: str) -> Principal | None:
        if len(token) > MAX_TOKEN_CHARS:
            return None
        principal = self.entries.get(token)
        if principal is not None:
            return principal
        found = self._store.token_role(token)
        if found is None:
            return None
        principal = Principal(found[0], Role(found[1]))
        self.entries.put(token, principal)
        return principal


def authorize(cache: TokenCache, token: str, role: Role) -> Principal:
    """The principal of ``token`` if it has at least ``role``; ApiError 401 or 403 otherwise."""
    if not token.strip():
        raise ApiError(401, "Unauthorized", "send a token: 'Authorization: Bearer TOKEN'")
    principal = cache.lookup(token.strip())
    if principal is None:
        raise ApiError(401, "Unauthorized", "the token is not valid")
    if not principal.can(role):
        raise ApiError(
            403,
            "Forbidden",
            f"{principal.name} has role {principal.role.value}; this needs {role.value} or higher",
        )
    return principal


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header ("" for anything else)."""
    scheme, _, token = authorization.partition(" ")
    return token if scheme.lower() == "bearer" else ""


def require(role: Role) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the caller's principal, if it has at least ``role``.

    Async, so that it runs on the loop: a sync dependency costs every request a hop to a
    worker thread and back, for what is a dict look-up but once per ``TokenCache`` period.
    """

    async def dependency(request: Request) -> Principal:
        token = bearer_token(request.headers.get("authorization", ""))
        principal = authorize(request.app.state.tokens, token, role)
        check_write(request, principal.name)  # before the route does any work
        return principal

    dependency.__name__ = f"require_{role.value}"
    return dependency
