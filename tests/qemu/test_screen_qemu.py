"""Issue 34's graphical console on real libvirt + QEMU: a guest's screen (a VGA card whose VNC
server listens nowhere) seen through the API's VNC WebSocket by noVNC in headless Chromium,
and by libvirt's own screenshot (GET /v1/vms/NAME/screenshot): both show the guest's text
screen, and the same one. A viewer is refused; the operator's session is in the audit log;
an idle session is closed.

The guest is the rig's busybox kernel and initrd with ``console=tty0`` besides the serial
console, so the kernel writes its boot messages on the VGA text screen (720x400) too. The
server runs in the test's event loop, as in ``test_console_qemu``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.drivers.test_png import decoded
from tests.web.browser import checked_page, chromium, sign_in
from virtplane.api.routes.display import SUBPROTOCOL
from virtplane.domain.resources import Boot, Metadata, RunPolicy, VirtualMachine, VirtualMachineSpec, VMPhase

from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

SCREENSHOT = Path("/tmp/virtplane-screen-qemu.png")  # the last one, to look at after a failure
SAME = 0.98  # the share of equal pixels in two looks at one text screen (the cursor blinks)
SCREEN_BOOT = "console=tty0 console=ttyS0 panic=-1 rdinit=/bin/busybox -- sh"
CANVAS_RGB = """(canvas) => {
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let binary = "";
  for (let i = 0; i < pixels.length; i += 4) binary += String.fromCharCode(pixels[i], pixels[i + 1], pixels[i + 2]);
  return [canvas.width, canvas.height, btoa(binary)];
}"""


def lit(rgb: bytes) -> int:
    """How many pixels are not black (text on the VGA text screen)."""
    return sum(1 for at in range(0, len(rgb), 3) if rgb[at : at + 3] != b"\0\0\0")


def same_share(first: bytes, second: bytes) -> float:
    """The share of pixels that are equal in two pictures of one size."""
    pixels = len(first) // 3
    return sum(first[at : at + 3] == second[at : at + 3] for at in range(0, len(first), 3)) / pixels


async def running_screen_guest(qplane: QemuPlane, name: str) -> None:
    await qplane.add_host("a")
    qplane.store.create(
        VirtualMachine(
            metadata=Metadata(name=name),
            spec=VirtualMachineSpec(
                run_policy=RunPolicy.ALWAYS_ON,
                cpu=1,
                memory_mib=192,
                boot=Boot(kernel="guest-kernel", initrd="guest-initrd", cmdline=SCREEN_BOOT),
            ),
        )
    )
    await qplane.wait_settled(name, VMPhase.RUNNING)


async def screenshot(server: str, token: str, vm: str) -> tuple[int, int, bytes]:
    """GET /v1/vms/NAME/screenshot (libvirt's), decoded."""
    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {token}"}) as client:
        shot = await client.get(f"/v1/vms/{vm}/screenshot")
    assert shot.status_code == 200, shot.text
    assert shot.headers["content-type"] == "image/png"
    SCREENSHOT.write_bytes(shot.content)
    return decoded(shot.content)


async def settled_screenshot(server: str, token: str, vm: str) -> tuple[int, int, bytes]:
    """libvirt's screenshot once the guest's screen has text and stays nearly the same between
    two looks (the kernel has stopped writing; the text cursor still blinks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIMIT_S
    previous = None
    while True:
        picture = await screenshot(server, token, vm)
        if previous is not None and lit(picture[2]) > 0 and same_share(picture[2], previous[2]) > SAME:
            return picture
        assert loop.time() < deadline, f"the screen never settled with text: {lit(picture[2])} lit"
        previous = picture
        await asyncio.sleep(0.5)  # the next look: the guest writes in between, or it settled


def novnc_canvas(url: str, token: str, vm: str) -> tuple[int, int, bytes]:
    """Sign in as an operator, open the VM's screen, and read noVNC's canvas once it has text."""
    from playwright.sync_api import expect

    with chromium() as browser, checked_page(browser) as page:
        sign_in(page, url, token)
        row = page.locator(f'#vms tr[data-name="{vm}"]')
        expect(row.locator("td.phase")).to_have_text("Running")
        row.locator("button.menu-toggle").click()  # the VM's actions are in its menu
        row.locator('button[data-action="screen"]').click()
        expect(page.locator("#screen-status")).to_have_text("connected")
        canvas = page.locator("#screen-view canvas")
        page.wait_for_function(
            """(canvas) => { const d = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
                 for (let i = 0; i < d.length; i += 4) if (d[i] || d[i + 1] || d[i + 2]) return true; return false; }""",
            arg=canvas.element_handle(),
            timeout=LIMIT_S * 1000,
        )
        width, height, rgb = canvas.evaluate(CANVAS_RGB)
        page.click("#screen-close")
        expect(page.locator("#screen-panel")).to_be_hidden()
    return width, height, base64.b64decode(rgb)


@pytest.mark.browser
async def test_novnc_and_libvirts_screenshot_show_the_same_guest_screen(
    qplane: QemuPlane, server: str
) -> None:
    await running_screen_guest(qplane, "screen-1")
    token = qplane.store.create_token("web-operator", "operator")
    width, height, shot = await settled_screenshot(server, token, "screen-1")
    assert (width, height) == (720, 400), "the VGA text screen"
    # Playwright's sync API runs its own loop: in a thread, while this loop serves the API
    seen = await asyncio.to_thread(novnc_canvas, server, token, "screen-1")
    print(f"\nscreenshot {width}x{height}, {lit(shot)} lit; canvas {seen[0]}x{seen[1]}, {lit(seen[2])} lit")
    after = await screenshot(server, token, "screen-1")
    assert seen[:2] == (width, height)
    assert max(same_share(seen[2], shot), same_share(seen[2], after[2])) > SAME, (
        "noVNC shows what libvirt does"
    )
    admin = qplane.store.create_token("audit-admin", "admin")
    async with httpx.AsyncClient(base_url=server, headers={"Authorization": f"Bearer {admin}"}) as client:
        audit = (await client.get("/v1/audit", params={"name": "screen-1"})).json()["items"]
    assert any(r["verb"] == "vnc-open" and r["token"] == "web-operator" for r in audit), audit


def graphics_of(qplane: QemuPlane, vm: str) -> list[ET.Element]:
    """The graphics devices of the VM's running domain, as its host's libvirt reports them."""
    import libvirt

    conn = libvirt.open(qplane.rig.hosts["a"].uri)
    try:
        return ET.fromstring(conn.lookupByName(qplane.domain(vm)).XMLDesc(0)).findall("devices/graphics")
    finally:
        conn.close()


async def test_a_viewer_is_refused_and_an_idle_session_closed(qplane: QemuPlane, server: str) -> None:
    await running_screen_guest(qplane, "screen-2")
    (graphics,) = graphics_of(qplane, "screen-2")
    # QEMU's VNC server has no port on any address: the API's connection comes through libvirt
    assert graphics.get("type") == "vnc" and graphics.get("port") is None, ET.tostring(graphics)
    assert [listen.get("type") for listen in graphics.findall("listen")] == ["none"]
    url = server.replace("http://", "ws://") + "/v1/vms/screen-2/vnc"
    viewer = qplane.store.create_token("a-viewer", "viewer")
    with pytest.raises(InvalidStatus) as refused:
        await connect(url, additional_headers={"Authorization": f"Bearer {viewer}"})
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body or b"{}")["reason"] == "Forbidden"
    qplane.plane.settings.set("console.idle_timeout_s", 2.0)
    operator = qplane.store.create_token("an-operator", "operator")
    headers: Any = {"Authorization": f"Bearer {operator}"}
    async with connect(url, additional_headers=headers, subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        assert await asyncio.wait_for(ws.recv(), LIMIT_S) == b"RFB 003.008\n", "QEMU's VNC server, unchanged"
        # nothing sent, no update asked for: QEMU says nothing more, and the session goes idle
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(ws.recv(), LIMIT_S)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (
        1000,
        "no input or output for 2 s (console.idle_timeout_s): closed",
    )
