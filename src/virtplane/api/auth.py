"""Bearer-token authentication and the three roles: viewer < operator < admin."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from fastapi import Request

from virtplane.api.errors import ApiError
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


class TokenCache:
    """Token → principal, cached briefly so that a busy API does not hash-and-query per call."""

    def __init__(self, store: Store, ttl_s: float = 5.0) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Principal | None]] = {}

    def lookup(self, token: str) -> Principal | None:
        now = time.monotonic()
        hit = self._entries.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        found = self._store.token_role(token)
        principal = None if found is None else Principal(found[0], Role(found[1]))
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[token] = (now + self._ttl_s, principal)
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
        return authorize(request.app.state.tokens, token, role)

    dependency.__name__ = f"require_{role.value}"
    return dependency
