"""Every error leaves the API as JSON ``{"reason": ..., "message": ...}`` with a 4xx code.

The errors of the layers below (domain, store) become HTTP statuses in one table,
``STATUS_OF``. Anything unexpected becomes a 500 with reason InternalError and no traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from virtplane.api.field_hints import unknown_field_message
from virtplane.domain import errors as domain
from virtplane.domain.resources import KIND_BY_NAME
from virtplane.domain.settings import SettingError
from virtplane.store import errors as store
from virtplane.store.claims import ClaimTaken
from virtplane.store.sealing import SecretsKeyError

log = logging.getLogger("virtplane.api")


class ApiError(Exception):
    """An answer ``{"reason", "message"}`` with ``status``; ``extra`` fields (not None) are added."""

    def __init__(self, status: int, reason: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.extra = {key: value for key, value in extra.items() if value is not None}


def error_response(status: int, reason: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"reason": reason, "message": message, **extra}, status_code=status)


def _path(loc: tuple[Any, ...] | list[Any]) -> list[Any]:
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    # pydantic names a model_validator failure by the model; it says nothing to users
    return [p for p in parts if not str(p)[:1].isupper() and not str(p).startswith("function-")]


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in _path(loc)) or "body"


def describe_validation_errors(errors: list[Any], model: type[BaseModel] | None = None) -> str:
    """``spec.cpu: Input should be ...; spec.memory: unknown field; did you mean memory_mib?``;
    with the ``model`` validated, an unknown field gets the name it likely meant."""
    lines = []
    for err in errors:
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            message = unknown_field_message(model, _path(err.get("loc", ()))) or message
        lines.append(f"{_location(err.get('loc', ()))}: {message}")
    return "; ".join(lines) or "invalid request"


def _fields(errors: list[Any]) -> list[str]:
    """The fields at fault, as the message names them (``spec.memory``): for clients that
    point at them, e.g. the CLI at a manifest's line."""
    return list(dict.fromkeys(_location(err.get("loc", ())) for err in errors))


def _body_model(request: Request) -> type[BaseModel] | None:
    """The model a route's JSON body is validated as (a resource kind), if it has one."""
    body_field = getattr(request.scope.get("route"), "body_field", None)
    annotation = getattr(getattr(body_field, "field_info", None), "annotation", None)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _resource_model(title: str) -> type[BaseModel] | None:
    """A resource kind by the name pydantic gives its ``ValidationError`` (``VirtualMachine``)."""
    return KIND_BY_NAME.get(title)


STATUS_OF: tuple[tuple[type[Exception], int, str | None], ...] = (
    # (exception, HTTP status, reason; None: the exception's own)
    (domain.NotFound, 404, None),
    (domain.Invalid, 422, None),
    (domain.Refused, 409, None),
    (domain.TooLarge, 413, None),
    (store.NotFound, 404, "NotFound"),
    (store.AlreadyExists, 409, "AlreadyExists"),
    (ClaimTaken, 409, None),  # MacInUse or AddressInUse
    (store.Conflict, 409, "Conflict"),
    # a store opened without its key cannot seal a password: the server's state, not the input
    (SecretsKeyError, 409, "SecretsKeyMissing"),
)


def mapped_error(exc: Exception) -> ApiError | None:
    """The answer ``STATUS_OF`` gives ``exc``; None for an exception not in the table."""
    for kind, status, reason in STATUS_OF:
        if isinstance(exc, kind):
            own = exc.reason if isinstance(exc, domain.DomainError | ClaimTaken) else type(exc).__name__
            return ApiError(status, reason or own, str(exc))
    return None


def _mapped(exc: Exception) -> JSONResponse:
    error = mapped_error(exc)
    if error is None:
        raise exc  # not in the table: the 500 handler logs it
    return error_response(error.status, error.reason, error.message)


_HTTP_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.reason, exc.message, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "MalformedJSON", "the request body is not valid JSON")
        message = describe_validation_errors(errors, _body_model(request))
        return error_response(422, "Invalid", message, fields=_fields(errors))

    @app.exception_handler(ValidationError)
    async def _model_invalid(_: Request, exc: ValidationError) -> JSONResponse:
        errors = list(exc.errors())
        message = describe_validation_errors(errors, _resource_model(exc.title))
        return error_response(422, "Invalid", message, fields=_fields(errors))

    async def _from_table(_: Request, exc: Exception) -> JSONResponse:
        return _mapped(exc)

    for kind, _status, _reason in STATUS_OF:
        app.add_exception_handler(kind, _from_table)

    @app.exception_handler(SettingError)
    async def _setting(_: Request, exc: SettingError) -> JSONResponse:
        unknown = str(exc).startswith("unknown setting")
        return error_response(
            404 if unknown else 400, "UnknownSetting" if unknown else "InvalidSetting", str(exc)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        reason = _HTTP_REASONS.get(exc.status_code, "Error")
        response = error_response(exc.status_code, reason, str(exc.detail))
        if exc.headers:  # e.g. the Allow of a 405, which RFC 9110 requires
            response.headers.update(exc.headers)
        return response

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "InternalError", "internal error; the server log has the details")
