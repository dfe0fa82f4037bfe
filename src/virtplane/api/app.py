"""The FastAPI application factory. Resources open and close in the lifespan handed in."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from virtplane import __version__
from virtplane.api.audit import AuditRecorder, AuditWrites
from virtplane.api.auth import Principal, Role, TokenCache, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import error_response, install_error_handlers
from virtplane.api.limits import Limiter, RequestLimits
from virtplane.api.openapi_errors import document_error_responses
from virtplane.api.routes.actions import router as actions_router
from virtplane.api.routes.audit import router as audit_router
from virtplane.api.routes.backup import router as backup_router
from virtplane.api.routes.backup_verify import router as backup_verify_router
from virtplane.api.routes.console import router as console_router
from virtplane.api.routes.display import router as display_router
from virtplane.api.routes.events import router as events_router
from virtplane.api.routes.faults import router as faults_router
from virtplane.api.routes.images import router as images_router
from virtplane.api.routes.login import router as login_router
from virtplane.api.routes.maintenance import router as maintenance_router
from virtplane.api.routes.oidc import router as oidc_router
from virtplane.api.routes.ova_import import router as ova_import_router
from virtplane.api.routes.placement import router as placement_router
from virtplane.api.routes.quarantine import router as quarantine_router
from virtplane.api.routes.rebalance import router as rebalance_router
from virtplane.api.routes.resources import add_resource_routes
from virtplane.api.routes.settings import router as settings_router
from virtplane.api.routes.tokens import router as tokens_router
from virtplane.api.routes.usage import router as usage_router
from virtplane.api.routes.vm_create import router as vm_create_router
from virtplane.api.routes.whoami import router as whoami_router
from virtplane.http_limits import streamed_body
from virtplane.web import router as web_router

MAX_BODY_BYTES = 1024 * 1024

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def body_refusal(headers: Headers, streamed: bool = False) -> Response | None:
    """The answer to a request whose body is too large, or of a size not known up front.
    A ``streamed`` body (an image upload) has no size limit here: its route has a quota."""
    length = headers.get("content-length")
    if length is not None and (not length.isdigit() or (not streamed and int(length) > MAX_BODY_BYTES)):
        return error_response(413, "PayloadTooLarge", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    if length is None and "chunked" in headers.get("transfer-encoding", "").lower():
        # a chunked body's size is known only once it is all read: it would slip past the limit
        return error_response(411, "LengthRequired", "send request bodies with a Content-Length, not chunked")
    return None


class BodyLimit:
    """Refuses bodies over ``MAX_BODY_BYTES`` before the route reads them.

    Plain ASGI rather than ``@app.middleware("http")``: that one runs the route in a task of
    its own and passes the answer through a stream, a few turns of the event loop on which
    a busy control plane queues reconciles ahead of every answer.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = body_refusal(Headers(scope=scope), streamed_body(scope["method"], scope["path"]))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


class TokenCacheCollector(Collector):
    """The size of the API's token cache, which only valid tokens may grow."""

    def __init__(self, tokens: TokenCache) -> None:
        self.tokens = tokens

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "virtplane_token_cache_entries", "Tokens in the API's cache.", value=len(self.tokens.entries)
        )
        yield GaugeMetricFamily(
            "virtplane_token_cache_bytes",
            "Estimated bytes the API's token cache holds.",
            value=self.tokens.entries.bytes,
        )


@asynccontextmanager
async def _no_lifespan(_: FastAPI) -> AsyncIterator[None]:
    yield


def create_app(
    ctx: ApiContext,
    *,
    lifespan: Lifespan | None = None,
    registry: CollectorRegistry | None = None,
    extra_routers: list[APIRouter] | None = None,
    more_metrics: Callable[[], str] | None = None,
    health_only: bool = False,
) -> FastAPI:
    """The API and the dashboard; ``health_only``: /healthz and /metrics alone (the controllers'
    process, on a port of its own on loopback: ``serve --role controllers``)."""
    app = FastAPI(
        title="virtplane",
        version=__version__,
        description="Virtualization control plane: VMs, hosts, storage, snapshots, operations.",
        lifespan=lifespan or _no_lifespan,
        # no 307 to a path without the trailing slash: /v1/vms/%2F is a 404, not a redirect to the list
        redirect_slashes=False,
        # /docs is the dashboard's (virtplane.web): Swagger UI shipped in the package, under its
        # content policy; FastAPI's pages would load it (and ReDoc) from a CDN
        docs_url=None,
        redoc_url=None,
    )
    app.state.ctx = ctx
    app.state.tokens = TokenCache(ctx.store)
    # ``serve`` sets its own from its flags; an app embedded elsewhere (tests, tools) limits
    # watches but not the pace of writes, which is a policy of the deployment
    app.state.limiter = Limiter(RequestLimits(writes_per_second=0))
    app.state.audit = AuditRecorder(ctx.store, ctx.settings)
    app.state.logins = None  # ``serve`` sets its ``Logins`` from [identity] in its config
    install_error_handlers(app)

    app.add_middleware(AuditWrites, recorder=app.state.audit)  # inside BodyLimit: sees only bodies it let in
    app.add_middleware(BodyLimit)

    @app.get("/healthz", tags=["Health"], operation_id="healthz", summary="Liveness and store reachability")
    def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "revision": ctx.store.revision(),
            "version": __version__,
            "controllers": ctx.controllers(),
            "pid": os.getpid(),  # which process answered: one of several (serve --workers)
        }

    if registry is not None:
        metrics_registry = registry

        @app.get("/metrics", tags=["Health"], operation_id="metrics", include_in_schema=False)
        async def metrics(  # on the event loop: collectors read the cache it updates
            _: Principal = Depends(require(Role.VIEWER)),  # it names every VM and host: a token
        ) -> Response:
            body = generate_latest(metrics_registry)
            if more_metrics is not None:  # families written as text (the usage: usage_metrics.py)
                body += more_metrics().encode()
            return Response(body, media_type=CONTENT_TYPE_LATEST)

    if health_only:  # and the simulator's faults, which run where it does (api/routes/faults.py)
        app.include_router(faults_router)
        return app
    app.include_router(whoami_router)
    app.include_router(actions_router)
    app.include_router(vm_create_router)
    app.include_router(ova_import_router)
    app.include_router(backup_verify_router)  # before the generic routes' /v1/backups/{name}
    add_resource_routes(app.router)
    app.include_router(settings_router)
    app.include_router(events_router)
    app.include_router(tokens_router)
    app.include_router(login_router)
    app.include_router(oidc_router)
    app.include_router(audit_router)
    app.include_router(faults_router)
    app.include_router(maintenance_router)
    app.include_router(placement_router)
    app.include_router(rebalance_router)
    app.include_router(usage_router)
    app.include_router(quarantine_router)
    app.include_router(console_router)
    app.include_router(display_router)
    app.include_router(backup_router)
    app.include_router(images_router)
    app.include_router(web_router)
    for router in extra_routers or []:
        app.include_router(router)
    document_error_responses(app)
    return app
