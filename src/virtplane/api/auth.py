"""Bearer-token authentication and the three roles: viewer < operator < admin."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request

from virtplane.api.errors import ApiError
from virtplane.api.limits import check_write
from virtplane.api.token_cache import BoundedCache
from virtplane.api.token_use import LastUse
from virtplane.domain.vocabulary import Role as Role  # the routes take it with require
from virtplane.store.database import utcnow
from virtplane.store.store import Store
from virtplane.store.tokens import TokenInfo

_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}

PRINCIPAL_KEY = "virtplane.principal"
"""Where ``require`` leaves the caller's principal in the ASGI scope."""


@dataclass(frozen=True)
class Principal:
    name: str
    """The token's name: its id in the token list and the audit log."""
    role: Role
    owner: str | None = None

    def can(self, needed: Role) -> bool:
        return _RANK[self.role] >= _RANK[needed]


MAX_TOKEN_CHARS = 256
"""Longer tokens are refused before any look-up (ours are 46 characters)."""


class TokenCache:
    """Token → its stored record, cached briefly so that a busy API does not hash-and-query per call.

    Bounded in entries and bytes (``BoundedCache``), and holding only tokens the store knows: a
    client sending wrong tokens, each different and large, makes it hold nothing more. The record
    is cached, not the verdict: ``authenticate`` checks expiry and revocation on every request,
    and a revocation through this process empties the cache (``invalidate``), so a revoked or
    expired token's next request is refused. (Another replica's revocation is seen here within
    ``ttl_s``.)"""

    def __init__(self, store: Store, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self._store = store
        self.entries: BoundedCache[TokenInfo] = BoundedCache(
            max_entries=max_entries, max_bytes=max_entries * (MAX_TOKEN_CHARS + 200), ttl_s=ttl_s
        )
        self.last_use = LastUse(store)

    def lookup(self, token: str) -> TokenInfo | None:
        if len(token) > MAX_TOKEN_CHARS:
            return None
        found = self.entries.get(token)
        if found is not None:
            return found
        found = self._store.token_info(token)
        if found is not None:
            self.entries.put(token, found)
        return found

    def invalidate(self) -> None:
        """Forget every cached record (a token was revoked)."""
        self.entries.clear()


def authorize(cache: TokenCache, token: str, role: Role) -> Principal:
    """The principal of ``token`` if it has at least ``role``; ApiError 401 or 403 otherwise."""
    return permit(authenticate(cache, token), role)


def authenticate(cache: TokenCache, token: str) -> Principal:
    """The principal of ``token``; ApiError 401 (with the reason: unknown, revoked, expired) otherwise."""
    if not token.strip():
        raise ApiError(401, "Unauthorized", "send a token: 'Authorization: Bearer TOKEN'")
    found = cache.lookup(token.strip())
    if found is None:
        raise ApiError(401, "Unauthorized", "the token is not valid")
    refusal = found.refusal(utcnow())
    if refusal is not None:
        raise ApiError(401, *refusal)
    cache.last_use.note(found.name)
    return Principal(found.name, Role(found.role), found.owner)


def permit(principal: Principal, role: Role) -> Principal:
    """``principal`` if it has at least ``role``; ApiError 403 otherwise."""
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
        principal = authenticate(request.app.state.tokens, token)
        request.scope[PRINCIPAL_KEY] = principal  # for the audit log, which records after the answer
        permit(principal, role)
        check_write(request, principal.name)  # before the route does any work
        return principal

    dependency.__name__ = f"require_{role.value}"
    return dependency
