"""A VM's screen: ``/v1/vms/{name}/vnc``, a WebSocket to its VNC server, and
``GET /v1/vms/{name}/screenshot``, a PNG of it (both operator role: the screen shows what the
serial console would).

The WebSocket carries RFB (the VNC protocol) in binary frames both ways, unchanged: noVNC
in the dashboard speaks it, and ``virtplane vnc VM`` forwards a local port to it for a native
viewer. The server connects to the VM's VNC server through the driver of the VM's host
(``open_display``), which lets it in: no port on a host listens for it and no VNC password
exists, so the viewer gets security type None. Authentication, refusals (404, 409 with a
reason), the idle timeout (``console.idle_timeout_s``) and the audit records are the serial
console's (``routes.console``); any number of sessions may watch one screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, Depends, Request, Response, WebSocket
from starlette.websockets import WebSocketDisconnect

from virtplane.api.audit import client_address, entry_for
from virtplane.api.auth import Principal, Role, authorize, bearer_token, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError, mapped_error
from virtplane.api.routes.console import (
    TOKEN_PREFIX,
    close_reason,
    idle_for,
    protocol_token,
    pump_from_guest,
    pump_to_guest,
    record_event,
    refuse_handshake,
)
from virtplane.domain.errors import DomainError
from virtplane.domain.resources import VirtualMachine
from virtplane.services.display import DisplayService, DisplaySession

log = logging.getLogger("virtplane.api.display")

router = APIRouter()

SUBPROTOCOL = "virtplane.vnc.v1"


def _displays(ctx: ApiContext) -> DisplayService:
    if ctx.displays is None:
        raise ApiError(501, "NotImplemented", "this server has no screens")
    return ctx.displays


async def _relay(websocket: WebSocket, ctx: ApiContext, session: DisplaySession) -> str:
    """Bytes both ways until one side ends or the session is idle too long; returns which one
    ended it (the event's reason)."""
    idle_timeout_s = ctx.settings.get_float("console.idle_timeout_s")
    session.last_activity = asyncio.get_running_loop().time()
    to_vm = asyncio.create_task(pump_to_guest(websocket, session))
    from_vm = asyncio.create_task(pump_from_guest(websocket, session))
    idled = asyncio.create_task(idle_for(session, idle_timeout_s))
    tasks = (to_vm, from_vm, idled)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
        await session.stream.close()
    if idled in done:
        why = f"no input or output for {idle_timeout_s:g} s (console.idle_timeout_s): closed"
        reason = "ScreenIdle"
    elif from_vm in done and from_vm.exception() is None:
        why = f"VM {session.vm}'s screen on host {session.host} ended (it stopped or left the host)"
        reason = "ScreenClosed"
    else:
        await record_event(ctx, session.vm, "ScreenDetached", "the viewer closed the screen")
        return "ScreenDetached"
    with contextlib.suppress(Exception):  # the client may be gone already
        await websocket.close(1000, close_reason(why))
    await record_event(ctx, session.vm, reason, why)
    return reason


@router.websocket("/v1/vms/{name}/vnc")
async def vnc(websocket: WebSocket, name: str) -> None:
    ctx: ApiContext = websocket.app.state.ctx
    offered = list(websocket.scope.get("subprotocols", []))
    subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
    header_token = bearer_token(websocket.headers.get("authorization", ""))
    browser = not header_token and any(p.startswith(TOKEN_PREFIX) for p in offered)
    try:
        principal = authorize(
            websocket.app.state.tokens, header_token or protocol_token(offered), Role.OPERATOR
        )
        displays = _displays(ctx)
        if ctx.catch_up is not None:
            await ctx.catch_up()
        session = await displays.open(name)
    except (ApiError, DomainError) as exc:
        refusal = exc if isinstance(exc, ApiError) else mapped_error(exc)
        assert refusal is not None  # every DomainError is in the table
        await refuse_handshake(websocket, refusal, browser=browser, subprotocol=subprotocol)
        return
    try:
        await websocket.accept(subprotocol=subprotocol)
    except BaseException:
        await session.stream.close()
        raise
    log.info("screen of VM %s on host %s: opened by %s", name, session.host, principal.name)
    await record_event(
        ctx, name, "ScreenOpened", f"{principal.name} opened the screen on host {session.host}"
    )
    audit = websocket.app.state.audit
    where = client_address(websocket.scope)
    await audit.record(
        entry_for(principal, where, "vnc-open", VirtualMachine.KIND, name, 101, subresource="vnc")
    )
    ended = await _relay(websocket, ctx, session)
    await audit.record(
        entry_for(
            principal, where, "vnc-close", VirtualMachine.KIND, name, 1000, subresource="vnc", reason=ended
        )
    )
    log.info("screen of VM %s on host %s: closed (%s)", name, session.host, principal.name)


@router.get(
    "/v1/vms/{name}/screenshot",
    tags=["VirtualMachine"],
    response_class=Response,
    responses={
        200: {"content": {"image/png": {}}, "description": "The VM's screen now, as PNG."},
        404: {"description": "No such VM."},
        409: {"description": "The VM does not run (NotRunning), or its host shows no screen."},
    },
)
async def screenshot(name: str, request: Request, _: Principal = Depends(require(Role.OPERATOR))) -> Response:
    """The VM's screen now, as PNG (libvirt's screenshot of its first display): for a thumbnail."""
    ctx: ApiContext = request.app.state.ctx
    displays = _displays(ctx)
    if ctx.catch_up is not None:
        await ctx.catch_up()
    picture = await displays.screenshot(name)
    return Response(picture, media_type="image/png", headers={"Cache-Control": "no-store"})


__all__ = ["SUBPROTOCOL", "router"]
