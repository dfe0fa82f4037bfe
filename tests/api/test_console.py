"""The console WebSocket against the real app under uvicorn (simulated hosts), through the
``websockets`` client the CLI uses: who may attach, the refusals, the relay, and its end."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from tests.conftest import LiveServer, seed_console_world, wait_json
from virtplane.api.routes.console import SUBPROTOCOL, TOKEN_PREFIX, close_reason

PROMPT = b"root@web-1:~# "


def ws_url(server: LiveServer, vm: str) -> str:
    return server.url.replace("http://", "ws://") + f"/v1/vms/{vm}/console"


def attach(server: LiveServer, vm: str = "web-1", role: str = "operator") -> ClientConnection:
    headers = {"Authorization": f"Bearer {server.tokens[role]}"}
    return connect(ws_url(server, vm), additional_headers=headers, subprotocols=[Subprotocol(SUBPROTOCOL)])


def attach_as_browser(server: LiveServer, vm: str = "web-1", role: str = "operator") -> ClientConnection:
    token = base64.urlsafe_b64encode(server.tokens[role].encode()).decode().rstrip("=")
    return connect(
        ws_url(server, vm), subprotocols=[Subprotocol(SUBPROTOCOL), Subprotocol(TOKEN_PREFIX + token)]
    )


def until(ws: ClientConnection, text: bytes) -> bytes:
    seen = b""
    while text not in seen:
        data = ws.recv(timeout=10)
        assert isinstance(data, bytes)
        seen += data
    return seen


def refusal(server: LiveServer, vm: str = "web-1", role: str = "operator") -> tuple[int, dict[str, Any]]:
    with pytest.raises(InvalidStatus) as refused:
        attach(server, vm, role)
    response = refused.value.response
    return response.status_code, json.loads(response.body or b"{}")


@pytest.fixture
def world(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.client("admin") as admin:
        seed_console_world(admin)
        yield admin


def test_an_operator_types_a_command_and_sees_the_answer(
    live_server: LiveServer, world: httpx.Client
) -> None:
    with attach(live_server) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        assert b"virtplane simulated guest web-1" in until(ws, PROMPT)
        ws.send(b"hostname\r")
        assert until(ws, PROMPT) == b"hostname\r\nweb-1\r\n" + PROMPT
        ws.send("echo text frames too\r")  # a text frame is sent as UTF-8
        assert b"\r\ntext frames too\r\n" in until(ws, PROMPT)
    reasons = [e["reason"] for e in world.get("/v1/events", params={"name": "web-1"}).json()["items"]]
    assert "ConsoleAttached" in reasons
    wait_json(
        world,
        "/v1/events?name=web-1",
        lambda body: any(e["reason"] == "ConsoleDetached" for e in body["items"]),
    )


def test_a_viewer_an_unknown_vm_and_a_stopped_vm_are_refused_with_a_reason(
    live_server: LiveServer, world: httpx.Client
) -> None:
    status, body = refusal(live_server, role="viewer")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert "needs operator" in body["message"]
    status, body = refusal(live_server, vm="nobody")
    assert (status, body["reason"]) == (404, "NotFound")
    status, body = refusal(live_server, vm="off-1")
    assert (status, body["reason"]) == (409, "NotRunning")
    assert "off-1 is Stopped" in body["message"]
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(live_server, "web-1"))  # no token at all
    assert refused.value.response.status_code == 401


def test_one_session_at_a_time(live_server: LiveServer, world: httpx.Client) -> None:
    with attach(live_server) as first:
        until(first, PROMPT)
        status, body = refusal(live_server)
        assert (status, body["reason"]) == (409, "ConsoleBusy")
    # The server lets go of the session after the close handshake, then records ConsoleDetached.
    wait_json(
        world,
        "/v1/events?name=web-1",
        lambda body: any(e["reason"] == "ConsoleDetached" for e in body["items"]),
    )
    with attach(live_server) as second:  # free again once the first detached
        until(second, PROMPT)


def test_a_browser_authenticates_by_subprotocol_and_reads_refusals_from_the_close(
    live_server: LiveServer, world: httpx.Client
) -> None:
    with attach_as_browser(live_server) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        until(ws, PROMPT)
    with attach_as_browser(live_server, role="viewer") as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4403
    assert closed.value.rcvd.reason.startswith("Forbidden: ")


def test_the_session_ends_with_the_reason_when_the_vm_stops(
    live_server: LiveServer, world: httpx.Client
) -> None:
    with attach(live_server) as ws:
        until(ws, PROMPT)
        stopped = world.patch("/v1/vms/web-1", json={"spec": {"run_policy": "AlwaysOff"}})
        assert stopped.status_code == 200, stopped.text
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "VM web-1 stopped")


def test_a_close_reason_fits_a_close_frame() -> None:
    assert len(close_reason("é" * 100).encode()) <= 123
    assert close_reason("é" * 100) == "é" * 61  # never half a character


def closed_with(ws: ClientConnection) -> tuple[int, str]:
    """Read until the server closes ``ws``; its close code and reason."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None, "the server closed it"
    return closed.value.rcvd.code, closed.value.rcvd.reason


def test_an_idle_session_is_detached_after_the_setting(live_server: LiveServer, world: httpx.Client) -> None:
    set_idle = world.patch("/v1/settings/console.idle_timeout_s", json={"spec": {"value": 0.5}})
    assert set_idle.status_code == 200, set_idle.text
    with attach(live_server) as ws:
        until(ws, PROMPT)
        code, reason = closed_with(ws)  # nothing typed: the session goes idle
    assert code == 1000
    assert reason == "no input or output for 0.5 s (console.idle_timeout_s): detached"
    wait_json(
        world, "/v1/events?name=web-1", lambda body: any(e["reason"] == "ConsoleIdle" for e in body["items"])
    )
    with attach(live_server) as again:  # the console is free again
        until(again, PROMPT)


def test_an_admin_takes_over_a_busy_console_and_the_holder_is_told(
    live_server: LiveServer, world: httpx.Client
) -> None:
    with attach(live_server) as held:
        until(held, PROMPT)
        status, body = refusal(live_server)
        assert (status, body["reason"]) == (409, "ConsoleBusy")
        assert "?takeover=true" in body["message"], "the refusal says how"
        with pytest.raises(InvalidStatus) as refused:  # an operator may not end another's session
            connect(
                ws_url(live_server, "web-1") + "?takeover=true",
                additional_headers={"Authorization": f"Bearer {live_server.tokens['operator']}"},
            )
        assert refused.value.response.status_code == 403
        admin_headers = {"Authorization": f"Bearer {live_server.tokens['admin']}"}
        with connect(
            ws_url(live_server, "web-1") + "?takeover=true", additional_headers=admin_headers
        ) as taker:
            code, reason = closed_with(held)
            assert (code, reason) == (4409, "ConsoleTakenOver: admin test-admin took over the serial console")
            until(taker, PROMPT)  # the greeting
            taker.send(b"hostname\r")
            assert until(taker, PROMPT) == b"hostname\r\nweb-1\r\n" + PROMPT
    events = world.get("/v1/events", params={"name": "web-1"}).json()["items"]
    assert any(
        e["reason"] == "ConsoleTakenOver" and e["message"] == "admin test-admin took over the serial console"
        for e in events
    ), events
    # the audit log says who took it from whom: both sessions' records, once both have closed
    audit = wait_json(
        world,
        "/v1/audit?name=web-1",
        lambda body: sum(r["verb"] == "console-close" for r in body["items"]) == 2,
    )
    sessions = {(r["verb"], r["token"], r["status"], r["reason"]) for r in audit["items"]}
    assert ("console-open", "test-admin", 101, "ConsoleTakenOver") in sessions, sessions
    assert ("console-close", "test-operator", 4409, "ConsoleTakenOver") in sessions, sessions
