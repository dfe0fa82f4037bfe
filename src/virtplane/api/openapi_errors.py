"""The error answers each operation lists in the OpenAPI document.

Every error leaves the API as ``{"reason", "message"}`` (``errors``). Which of 401, 403,
404, 409 and 422 an operation can answer follows from what it is, read off the document
itself: every ``/v1`` operation needs a token (401); a write (POST, PUT, PATCH, DELETE)
needs a role above viewer, the role that only reads (403), and may conflict with the
stored state (409: a stale ``resource_version``, a name taken, an operation the VM's state
refuses); a path that names an object may name none (404); parameters or a body may be
invalid (422). ``tests/api/test_openapi_errors.py`` checks the 401s and 403s against the
running app. Two operations are otherwise: the login needs no token (``TOKEN_FREE``: its 401
is a wrong password, its 403 a user without a role), and a logout is a write any role makes.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

__all__ = ["ANY_ROLE", "TOKEN_FREE", "ErrorBody", "document_error_responses", "errors_of"]

WRITE_METHODS = frozenset({"post", "put", "patch", "delete"})
TOKEN_FREE = frozenset({("post", "/v1/login"), ("post", "/v1/login/oidc/start"), ("post", "/v1/login/oidc")})
"""Operations that need no token, with their own 401, 403, 429 and 503."""
ANY_ROLE = frozenset({("post", "/v1/logout")})
"""Writes any valid token may make (no 403; a 409 for a token that is not a login's)."""
FASTAPI_VALIDATION_DESCRIPTION = "Validation Error"

_DESCRIPTIONS = {
    401: "No token, or a token the server does not know (reason Unauthorized).",
    403: "The token's role may not do this; the message names the role needed (reason Forbidden).",
    404: "The object named in the path does not exist (reason NotFound, or the kind's own).",
    409: "A conflict: a stale resource_version, a name already taken, or a request the object's "
    "state refuses (reason Conflict, AlreadyExists, NotApplicable, ...).",
    422: "An invalid body or parameter; the message names the field.",
    429: "Too many requests from this client; retry_after_s says when to try again.",
    503: "A service this needs (the directory) did not answer; the message says which.",
}


class ErrorBody(BaseModel):
    """What every error answer is: a machine-readable reason and a message for people."""

    reason: str
    message: str
    fields: list[str] | None = Field(
        None,
        description="With a 422 for a body that is not valid: the fields at fault, e.g. spec.memory_mib.",
    )


def errors_of(path: str, method: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses the operation ``method path`` can answer (see the module docstring)."""
    if not path.startswith("/v1/"):
        return []
    if (method, path) in TOKEN_FREE:
        return [401, 403, 422, 429, 503]
    if (method, path) in ANY_ROLE:
        return [401, 409]
    statuses = [401]
    if method in WRITE_METHODS:
        statuses.append(403)
    if "{" in path:
        statuses.append(404)
    if method in WRITE_METHODS:
        statuses.append(409)
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.append(422)
    return statuses


def document_error_responses(app: FastAPI) -> None:
    """Make ``app.openapi()`` list each operation's error answers with the ``ErrorBody`` schema
    (FastAPI's documented way to extend the document: replace ``app.openapi``). An answer a
    route documents itself keeps its description."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            _add_errors(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_errors(document: dict[str, Any]) -> None:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorBody"] = ErrorBody.model_json_schema()
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in errors_of(path, method, operation):
                own = responses.get(str(status), {})
                description = own.get("description")
                if description == FASTAPI_VALIDATION_DESCRIPTION:  # its schema is not ours
                    description = None
                responses[str(status)] = {
                    "description": description or _DESCRIPTIONS[status],
                    "content": body,
                }
