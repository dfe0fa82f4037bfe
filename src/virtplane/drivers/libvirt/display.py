"""A domain's screen through libvirt: ``virDomainOpenGraphicsFD`` and ``virDomainScreenshot``.

The domains' VNC servers listen nowhere (``domain_xml``: ``<listen type='none'/>``); libvirt
asks QEMU for a new client connection and passes its end of a socket pair back over the
libvirt connection itself, so nothing on the host or the network can connect to a screen
but through libvirt. Passing a file descriptor needs a connection over a UNIX socket (a
local ``qemu:///`` URI, or ``qemu+ssh://`` with libvirt's native ssh proxy); over TCP or TLS
libvirt refuses it, and that is ``Unsupported``, said as such. SKIPAUTH: the control plane
already checked who may look, and QEMU has no password to check.

A screenshot is QEMU's ``screendump`` streamed back as PPM, converted to PNG (``png``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from virtplane.drivers.errors import NotRunning, PermanentError, Unsupported
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.png import png_from_ppm

CHUNK = 64 * 1024
MAX_SCREENSHOT_BYTES = 64 * 1024 * 1024  # a 4K screen as PPM is 25 MiB


class SocketDisplay:
    """One connection to a domain's VNC server (a ``DisplayStream``), on an asyncio socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self) -> bytes:
        try:
            return await self._reader.read(CHUNK)
        except OSError:  # QEMU's end went away with the guest's process
            return b""

    async def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            return
        with contextlib.suppress(OSError):
            self._writer.write(data)
            await self._writer.drain()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def graphics_fd(dom: LibvirtDomain) -> int:
    """A new client connection to ``dom``'s VNC server (blocking: run it in the executor)."""
    lv = _libvirt.load()
    if not dom.is_active():
        raise NotRunning(f"domain {dom.name} is not running: a screen needs a live guest")
    try:
        return dom.open_graphics_fd(lv.VIR_DOMAIN_OPEN_GRAPHICS_SKIPAUTH)
    except lv.libvirtError as exc:
        if _libvirt.error_code(exc) == lv.VIR_ERR_OPERATION_INVALID:
            raise NotRunning(f"domain {dom.name} is not running: a screen needs a live guest") from exc
        if "fd passing" in str(exc).lower() or "file descriptor" in str(exc).lower():
            raise Unsupported(
                "this libvirt connection cannot pass file descriptors (TCP or TLS): a VM's screen "
                "needs a qemu:/// or qemu+ssh:// URI"
            ) from exc
        raise


async def open_display(fd: int) -> SocketDisplay:
    """``fd`` (from ``graphics_fd``) as a display stream on the running loop."""
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    return SocketDisplay(reader, writer)


def screenshot_png(conn: Any, dom: LibvirtDomain) -> bytes:
    """The domain's first screen as PNG (blocking: run it in the executor)."""
    if not dom.is_active():
        raise NotRunning(f"domain {dom.name} is not running: a screen needs a live guest")
    stream = conn.newStream(0)
    try:
        mime = dom.screenshot(stream)
        picture = bytearray()

        def take(_stream: Any, data: bytes, _opaque: object) -> int:
            picture.extend(data)
            if len(picture) > MAX_SCREENSHOT_BYTES:
                return -1  # ends recvAll with an error: no screen is this large
            return len(data)

        stream.recvAll(take, None)
        stream.finish()
    except BaseException:
        with contextlib.suppress(Exception):
            stream.abort()
        raise
    if mime == "image/png":
        return bytes(picture)
    if mime != "image/x-portable-pixmap":
        raise PermanentError(f"the host sent a screenshot as {mime}, which is neither PPM nor PNG")
    return png_from_ppm(bytes(picture))


__all__ = ["SocketDisplay", "graphics_fd", "open_display", "screenshot_png"]
