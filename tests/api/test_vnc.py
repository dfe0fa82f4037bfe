"""A VM's screen through the server against the real app under uvicorn (simulated hosts):
the VNC WebSocket carries the VM's RFB unchanged, who may open it, the refusals, the audit
record, the idle timeout and the end; the screenshot is the same picture as PNG."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from tests.conftest import LiveServer, seed_console_world, wait_json
from tests.drivers.test_png import decoded
from tests.rfb import Rfb, full_screen, handshake
from virtplane.api.routes.console import TOKEN_PREFIX
from virtplane.api.routes.display import SUBPROTOCOL


def ws_url(server: LiveServer, vm: str) -> str:
    return server.url.replace("http://", "ws://") + f"/v1/vms/{vm}/vnc"


def open_screen(server: LiveServer, vm: str = "web-1", role: str = "operator") -> ClientConnection:
    headers = {"Authorization": f"Bearer {server.tokens[role]}"}
    return connect(ws_url(server, vm), additional_headers=headers, subprotocols=[Subprotocol(SUBPROTOCOL)])


def refused(server: LiveServer, vm: str = "web-1", role: str = "operator") -> tuple[int, str, str]:
    with pytest.raises(InvalidStatus) as refusal:
        open_screen(server, vm, role)
    response = refusal.value.response
    body = json.loads(response.body or b"{}")
    return response.status_code, body["reason"], body["message"]


def closed_with(ws: ClientConnection) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None, "the server closed it"
    return closed.value.rcvd.code, closed.value.rcvd.reason


@pytest.fixture
def world(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.client("admin") as admin:
        seed_console_world(admin)
        yield admin


def test_the_vms_rfb_passes_through_and_the_screenshot_is_the_same_picture(
    live_server: LiveServer, world: httpx.Client
) -> None:
    with open_screen(live_server) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        rfb = Rfb.over_websocket(ws)
        screen = full_screen(rfb)
    assert rfb.received[0] == b"RFB 003.008\n", "the VM's first bytes, unchanged and alone"
    assert (screen.width, screen.height, screen.name) == (320, 200, "virtplane simulated guest web-1")
    assert len(set(screen.rgb[i : i + 3] for i in range(0, len(screen.rgb), 3))) > 2, "not blank"
    with live_server.client("operator") as operator:
        shot = operator.get("/v1/vms/web-1/screenshot")
    assert shot.status_code == 200, shot.text
    assert shot.headers["content-type"] == "image/png"
    assert decoded(shot.content) == (screen.width, screen.height, screen.rgb)
    # the session is in the audit log and the VM's events
    audit = wait_json(
        world, "/v1/audit?name=web-1", lambda body: any(r["verb"] == "vnc-close" for r in body["items"])
    )
    records = {(r["verb"], r["token"], r["subresource"], r["reason"]) for r in audit["items"]}
    assert ("vnc-open", "test-operator", "vnc", "") in records, records
    assert ("vnc-close", "test-operator", "vnc", "ScreenDetached") in records, records
    reasons = [e["reason"] for e in world.get("/v1/events", params={"name": "web-1"}).json()["items"]]
    assert "ScreenOpened" in reasons


def test_a_viewer_an_unknown_vm_and_a_stopped_vm_are_refused_with_a_reason(
    live_server: LiveServer, world: httpx.Client
) -> None:
    status, reason, message = refused(live_server, role="viewer")
    assert (status, reason) == (403, "Forbidden") and "needs operator" in message
    assert refused(live_server, vm="nobody")[:2] == (404, "NotFound")
    status, reason, message = refused(live_server, vm="off-1")
    assert (status, reason) == (409, "NotRunning") and "off-1 is Stopped" in message
    with pytest.raises(InvalidStatus) as anonymous:
        connect(ws_url(live_server, "web-1"))
    assert anonymous.value.response.status_code == 401
    with live_server.client("viewer") as viewer, live_server.client("operator") as operator:
        assert viewer.get("/v1/vms/web-1/screenshot").status_code == 403
        assert operator.get("/v1/vms/nobody/screenshot").status_code == 404
        stopped = operator.get("/v1/vms/off-1/screenshot")
        assert (stopped.status_code, stopped.json()["reason"]) == (409, "NotRunning"), stopped.text
    audit = world.get("/v1/audit", params={"name": "web-1"}).json()["items"]
    assert not any(r["verb"] == "vnc-open" for r in audit), "a refused viewer opened no session"


def test_several_viewers_share_a_screen_and_a_browser_authenticates_by_subprotocol(
    live_server: LiveServer, world: httpx.Client
) -> None:
    token = base64.urlsafe_b64encode(live_server.tokens["operator"].encode()).decode().rstrip("=")
    protocols = [Subprotocol(SUBPROTOCOL), Subprotocol(TOKEN_PREFIX + token)]
    with (
        open_screen(live_server) as first,
        connect(ws_url(live_server, "web-1"), subprotocols=protocols) as second,
    ):
        assert handshake(Rfb.over_websocket(first))[:2] == (320, 200)
        assert handshake(Rfb.over_websocket(second))[:2] == (320, 200)
    viewer = base64.urlsafe_b64encode(live_server.tokens["viewer"].encode()).decode().rstrip("=")
    with connect(
        ws_url(live_server, "web-1"),
        subprotocols=[Subprotocol(SUBPROTOCOL), Subprotocol(TOKEN_PREFIX + viewer)],
    ) as ws:
        code, reason = closed_with(ws)
    assert code == 4403 and reason.startswith("Forbidden: "), (code, reason)


def test_an_idle_session_is_closed_after_the_setting(live_server: LiveServer, world: httpx.Client) -> None:
    set_idle = world.patch("/v1/settings/console.idle_timeout_s", json={"spec": {"value": 0.5}})
    assert set_idle.status_code == 200, set_idle.text
    with open_screen(live_server) as ws:
        handshake(Rfb.over_websocket(ws))
        code, reason = closed_with(ws)  # the picture does not change and nothing is sent: idle
    assert (code, reason) == (1000, "no input or output for 0.5 s (console.idle_timeout_s): closed")
    wait_json(
        world, "/v1/audit?name=web-1", lambda body: any(r["reason"] == "ScreenIdle" for r in body["items"])
    )


def test_the_session_ends_with_the_reason_when_the_vm_stops(
    live_server: LiveServer, world: httpx.Client
) -> None:
    with open_screen(live_server) as ws:
        handshake(Rfb.over_websocket(ws))
        stopped = world.patch("/v1/vms/web-1", json={"spec": {"run_policy": "AlwaysOff"}})
        assert stopped.status_code == 200, stopped.text
        code, reason = closed_with(ws)
    assert code == 1000 and reason.startswith("VM web-1's screen on host host-1 ended"), reason
