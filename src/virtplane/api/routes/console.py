"""``/v1/vms/{name}/console``: a WebSocket to the VM's serial console (operator role).

Binary frames both ways carry the console's bytes (a text frame from the client is sent
as UTF-8). The token comes in the ``Authorization: Bearer`` header, or, from a browser
(which cannot set headers on a WebSocket), as the subprotocol ``virtplane.bearer.<token in
base64url>`` next to ``virtplane.console.v1``, never in the URL (URLs end up in access logs).

A refusal before the session (401, 403, 404, 409: VM not running, console busy, host away)
is the API's usual ``{reason, message}`` answer with its status to a client that sent the
header; a browser cannot read a refused handshake, so one that authenticated by subprotocol
gets the connection accepted and closed at once with code 4000 + status and the reason.
A session ends with code 1000 and, when the guest's side ended it, why (it stopped, it
left the host); attaching and detaching are recorded as events of the VM.

A session with no byte either way for ``console.idle_timeout_s`` is ended (code 1000, the
reason says so): it holds the VM's only console. An admin may attach with ``?takeover=true``
to a console another session holds: that session ends (code 4409, who took it over).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from typing import Protocol

from fastapi import APIRouter, WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from virtplane.api.audit import client_address, entry_for
from virtplane.api.auth import Principal, Role, authorize, bearer_token
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError, error_response, mapped_error
from virtplane.domain.errors import DomainError
from virtplane.domain.resources import EventType, VirtualMachine
from virtplane.drivers.base import ConsoleStream
from virtplane.services.console import ConsoleService, ConsoleSession

log = logging.getLogger("virtplane.api.console")

router = APIRouter()

SUBPROTOCOL = "virtplane.console.v1"
TOKEN_PREFIX = "virtplane.bearer."
REFUSAL_CODE_BASE = 4000  # a refusal after the handshake closes with 4000 + the HTTP status
MAX_CLOSE_REASON_BYTES = 123  # what a WebSocket close frame can carry
TAKEN_OVER_CODE = REFUSAL_CODE_BASE + 409


def protocol_token(offered: list[str]) -> str:
    for protocol in offered:
        if protocol.startswith(TOKEN_PREFIX):
            encoded = protocol.removeprefix(TOKEN_PREFIX)
            with contextlib.suppress(binascii.Error, ValueError):
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    return ""


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame carries, on a character boundary."""
    return text.encode()[:MAX_CLOSE_REASON_BYTES].decode(errors="ignore")


async def refuse_handshake(
    websocket: WebSocket, error: ApiError, *, browser: bool, subprotocol: str | None
) -> None:
    if not browser and "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(error.status, error.reason, error.message))
        return
    await websocket.accept(subprotocol=subprotocol)
    await websocket.close(REFUSAL_CODE_BASE + error.status, close_reason(f"{error.reason}: {error.message}"))


async def record_event(ctx: ApiContext, vm: str, reason: str, message: str) -> None:
    record = (VirtualMachine.KIND, vm, reason, message, EventType.NORMAL)
    await run_in_threadpool(ctx.store.record_events, [record])


class Relayed(Protocol):
    """A console or screen session: the guest's byte stream, and when a byte last went by."""

    last_activity: float

    @property
    def stream(self) -> ConsoleStream: ...


async def pump_to_guest(websocket: WebSocket, session: Relayed) -> None:
    loop = asyncio.get_running_loop()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") or (message.get("text") or "").encode()
        if data:
            session.last_activity = loop.time()
            await session.stream.write(data)


async def pump_from_guest(websocket: WebSocket, session: Relayed) -> None:
    loop = asyncio.get_running_loop()
    while data := await session.stream.read():
        session.last_activity = loop.time()
        await websocket.send_bytes(data)


class Activity(Protocol):
    last_activity: float


async def idle_for(session: Activity, timeout_s: float) -> None:
    """Returns once no byte went either way for ``timeout_s`` (never with 0)."""
    loop = asyncio.get_running_loop()
    if timeout_s <= 0:
        await asyncio.Event().wait()
    while (left := session.last_activity + timeout_s - loop.time()) > 0:
        await asyncio.sleep(left)  # a timer on the loop's clock, re-armed by activity


async def _relay(
    websocket: WebSocket, ctx: ApiContext, consoles: ConsoleService, session: ConsoleSession
) -> str:
    """Bytes both ways until one side ends, the session is idle too long or an admin takes
    it over; then the rest is ended too. Returns which one ended it, as the event's reason."""
    idle_timeout_s = ctx.settings.get_float("console.idle_timeout_s")
    session.last_activity = asyncio.get_running_loop().time()
    to_guest = asyncio.create_task(pump_to_guest(websocket, session))
    from_guest = asyncio.create_task(pump_from_guest(websocket, session))
    idle = asyncio.create_task(idle_for(session, idle_timeout_s))
    taken_over = asyncio.create_task(session.taken_over.wait())
    tasks = (to_guest, from_guest, idle, taken_over)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
        await session.stream.close()
        consoles.release(session)
    if taken_over in done:
        why = f"admin {session.taken_over_by} took over the serial console"
        with contextlib.suppress(Exception):
            await websocket.close(TAKEN_OVER_CODE, close_reason(f"ConsoleTakenOver: {why}"))
        await record_event(ctx, session.vm, "ConsoleTakenOver", why)
        return "ConsoleTakenOver"
    if idle in done:
        why = f"no input or output for {idle_timeout_s:g} s (console.idle_timeout_s): detached"
        with contextlib.suppress(Exception):
            await websocket.close(1000, close_reason(why))
        await record_event(ctx, session.vm, "ConsoleIdle", why)
        return "ConsoleIdle"
    if from_guest in done and from_guest.exception() is None:
        why = await consoles.why_ended(session)
        with contextlib.suppress(Exception):  # the client may be gone already
            await websocket.close(1000, close_reason(why))
        await record_event(ctx, session.vm, "ConsoleClosed", why)
        return "ConsoleClosed"
    await record_event(ctx, session.vm, "ConsoleDetached", "the client detached from the serial console")
    return "ConsoleDetached"


@router.websocket("/v1/vms/{name}/console")
async def console(websocket: WebSocket, name: str) -> None:
    ctx: ApiContext = websocket.app.state.ctx
    offered = list(websocket.scope.get("subprotocols", []))
    subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
    header_token = bearer_token(websocket.headers.get("authorization", ""))
    # a browser can read only a close, not a refused handshake
    browser = not header_token and any(p.startswith(TOKEN_PREFIX) for p in offered)
    takeover = websocket.query_params.get("takeover", "").lower() in ("1", "true", "yes")
    principal: Principal
    try:
        principal = authorize(
            websocket.app.state.tokens,
            header_token or protocol_token(offered),
            Role.ADMIN if takeover else Role.OPERATOR,  # ending another's session: admins only
        )
        if ctx.consoles is None:
            raise ApiError(501, "NotImplemented", "this server has no console service")
        if ctx.catch_up is not None:
            await ctx.catch_up()
        session = await ctx.consoles.open(name, takeover_by=principal.name if takeover else None)
    except ApiError as error:
        await refuse_handshake(websocket, error, browser=browser, subprotocol=subprotocol)
        return
    except DomainError as exc:
        refusal = mapped_error(exc)
        assert refusal is not None  # every DomainError is in the table
        await refuse_handshake(websocket, refusal, browser=browser, subprotocol=subprotocol)
        return
    try:
        await websocket.accept(subprotocol=subprotocol)
    except BaseException:
        await session.stream.close()
        ctx.consoles.release(session)
        raise
    log.info("console of VM %s on host %s: attached by %s", name, session.host, principal.name)
    await record_event(
        ctx,
        name,
        "ConsoleAttached",
        f"{principal.name} attached to the serial console on host {session.host}",
    )
    audit = websocket.app.state.audit
    where = client_address(websocket.scope)
    await audit.record(
        entry_for(
            principal,
            where,
            "console-open",
            VirtualMachine.KIND,
            name,
            101,
            subresource="console",
            reason="ConsoleTakenOver" if takeover else "",  # an admin ended another's session
        )
    )
    ended = await _relay(websocket, ctx, ctx.consoles, session)
    await audit.record(
        entry_for(
            principal,
            where,
            "console-close",
            VirtualMachine.KIND,
            name,
            TAKEN_OVER_CODE if ended == "ConsoleTakenOver" else 1000,
            subresource="console",
            reason=ended,
        )
    )
    log.info("console of VM %s on host %s: detached (%s)", name, session.host, principal.name)


__all__ = [
    "MAX_CLOSE_REASON_BYTES",
    "REFUSAL_CODE_BASE",
    "SUBPROTOCOL",
    "TAKEN_OVER_CODE",
    "TOKEN_PREFIX",
    "Activity",
    "close_reason",
    "idle_for",
    "protocol_token",
    "record_event",
    "refuse_handshake",
    "router",
]
