"""A domain's screen through libvirt: ``virDomainOpenGraphicsFD`` and ``virDomainScreenshot``.

The domains' VNC servers listen nowhere (``domain_xml``: ``<listen type='none'/>``); libvirt
asks QEMU for a new client connection and passes its end of a socket pair back over the
libvirt connection itself, so nothing on the host or the network can connect to a screen
but through libvirt. Passing a file descriptor needs a connection over a local UNIX socket
(``qemu:///system``, ``qemu+unix://``), so it is never asked for over any other URI (a
``qemu+ssh`` host's screen is its VNC socket through ssh, ``display_ssh``; a ``qemu+tls``
host's is ``Unsupported``; screenshots stream over any connection): over ``qemu+ssh`` the client's
end is a socket pair to ssh, so libvirt believes it can take the descriptor, the daemon
sends it to ssh's netcat, which drops it, and the whole connection to the host is lost
(seen on the rig: "I/O error"), which must not follow from opening a screen. SKIPAUTH: the control plane
already checked who may look, and QEMU has no password to check.

A screenshot is QEMU's ``screendump`` streamed back as PPM, converted to PNG (``png``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any
from urllib.parse import urlsplit

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


def passes_descriptors(uri: str) -> bool:
    """Whether libvirt's connection to ``uri`` is a local UNIX socket (it can carry a descriptor)."""
    parts = urlsplit(uri)
    _driver, _, transport = parts.scheme.partition("+")
    return transport in ("", "unix") and not parts.hostname


def graphics_fd(dom: LibvirtDomain) -> int:
    """A new client connection to ``dom``'s VNC server (blocking: run it in the executor)."""
    lv = _libvirt.load()
    if not dom.is_active():
        raise NotRunning(f"domain {dom.name} is not running: a screen needs a live guest")
    try:
        return dom.open_graphics_fd(lv.VIR_DOMAIN_OPEN_GRAPHICS_SKIPAUTH)
    except lv.libvirtError as exc:
        # the remote driver's refusal is OPERATION_INVALID too: told apart by what it says
        if "file descriptor" in str(exc).lower():
            raise Unsupported(
                "libvirt cannot pass a connection to the VM's screen over this host's URI (only a "
                "local UNIX socket can: qemu:///system, qemu+unix://); its screenshot still works"
            ) from exc
        if _libvirt.error_code(exc) == lv.VIR_ERR_OPERATION_INVALID:
            raise NotRunning(f"domain {dom.name} is not running: a screen needs a live guest") from exc
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


__all__ = ["SocketDisplay", "graphics_fd", "open_display", "passes_descriptors", "screenshot_png"]
