"""The simulated guests' screens: each is a small RFB (VNC) server, one per session, that
serves a fixed picture (bands in a colour of the VM's own, so two VMs' screens differ).

It speaks RFB 3.8 (RFC 6143) as QEMU's VNC server does to a client the control plane let in
(``virDomainOpenGraphicsFD`` with SKIPAUTH): the version, security type None, the server's
init, then raw framebuffer updates in the pixel format the client asked for. Keys, pointer
and clipboard are read and ignored; the picture does not change, so an incremental update
request gets no answer (as QEMU sends none while nothing changed). A client that breaks the
protocol is hung up on. Several sessions may look at one screen (VNC's shared mode); all end
when the domain's instance does.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from collections.abc import Callable

from virtplane.drivers.png import ppm_from_rgb

WIDTH, HEIGHT = 320, 200
VERSION = b"RFB 003.008\n"
SECURITY_NONE = 1
# 32 bits per pixel, depth 24, little-endian, true colour, 8 bits a channel, red at bit 16
NATIVE_FORMAT = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)
MAX_CUT_TEXT = 1024 * 1024
# client message type -> its length before any variable part
_FIXED_LENGTH = {0: 20, 2: 4, 3: 10, 4: 8, 5: 6, 6: 8}


def screen_rgb(vm_name: str) -> bytes:
    """The simulated screen as R, G, B bytes, row by row: bands of the VM's colour over grey."""
    r, g, b = hashlib.sha256(vm_name.encode("utf-8", "surrogatepass")).digest()[:3]
    rows = []
    half = WIDTH // 2
    for y in range(HEIGHT):
        shade = 255 - (y * 128 // HEIGHT)
        colour = bytes((r * shade // 255, g * shade // 255, b * shade // 255)) * half
        grey = bytes((48, 48, 48)) * (WIDTH - half)
        rows.append(colour + grey if (y // 20) % 2 == 0 else grey + colour)  # a checker of bands
    return b"".join(rows)


def screen_ppm(vm_name: str) -> bytes:
    return ppm_from_rgb(WIDTH, HEIGHT, screen_rgb(vm_name))


def _encode(rgb: bytes, pixel_format: bytes) -> bytes:
    """``rgb`` in an RFB pixel format (true colour; a palette format gets grey levels)."""
    bpp, _depth, big_endian, _true, r_max, g_max, b_max, r_shift, g_shift, b_shift = struct.unpack(
        ">BBBBHHHBBB3x", pixel_format
    )
    size = max(bpp // 8, 1)
    order = "big" if big_endian else "little"
    cache: dict[bytes, bytes] = {}
    out = bytearray()
    for at in range(0, len(rgb), 3):
        triple = rgb[at : at + 3]
        pixel = cache.get(triple)
        if pixel is None:
            red, green, blue = triple
            value = (
                (red * r_max // 255) << r_shift
                | (green * g_max // 255) << g_shift
                | (blue * b_max // 255) << b_shift
            )
            pixel = cache[triple] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, order)
        out += pixel
    return bytes(out)


class SimScreenSession:
    """One RFB session on a simulated screen (a ``DisplayStream``); made by ``SimConsoles``."""

    def __init__(self, vm_name: str, release: Callable[[SimScreenSession], None]) -> None:
        self._vm_name = vm_name
        self._release = release
        self._output: asyncio.Queue[bytes] = asyncio.Queue()
        self._input = bytearray()
        self._state = "version"
        self._pixel_format = NATIVE_FORMAT
        self._ended = False
        self._output.put_nowait(VERSION)

    async def read(self) -> bytes:
        data = await self._output.get()
        if not data:
            self._output.put_nowait(b"")  # every later read sees the end too
        return data

    async def write(self, data: bytes) -> None:
        if self._ended:
            return
        self._input += data
        while not self._ended and self._step():
            pass

    def _take(self, count: int) -> bytes | None:
        if len(self._input) < count:
            return None
        taken = bytes(self._input[:count])
        del self._input[:count]
        return taken

    def _step(self) -> bool:
        """Handle one complete client message at the head of the input; False: wait for more."""
        if self._state == "version":
            if self._take(len(VERSION)) is None:
                return False
            self._output.put_nowait(bytes((1, SECURITY_NONE)))
            self._state = "security"
        elif self._state == "security":
            chosen = self._take(1)
            if chosen is None:
                return False
            if chosen[0] != SECURITY_NONE:
                reason = b"only security type None is offered"
                self._output.put_nowait(struct.pack(">II", 1, len(reason)) + reason)
                self.hang_up()
                return False
            self._output.put_nowait(struct.pack(">I", 0))
            self._state = "init"
        elif self._state == "init":
            if self._take(1) is None:  # the shared flag: every session shares the screen
                return False
            name = f"virtplane simulated guest {self._vm_name}".encode()
            init = struct.pack(">HH", WIDTH, HEIGHT) + NATIVE_FORMAT + struct.pack(">I", len(name)) + name
            self._output.put_nowait(init)
            self._state = "normal"
        else:
            return self._message()
        return True

    def _message(self) -> bool:
        if not self._input:
            return False
        kind = self._input[0]
        length = _FIXED_LENGTH.get(kind)
        if length is None:
            self.hang_up()  # a message we cannot skip: the stream is out of step
            return False
        if len(self._input) < length:
            return False
        if kind == 2:  # SetEncodings: then four bytes per encoding
            length += 4 * struct.unpack(">H", self._input[2:4])[0]
        elif kind == 6:  # ClientCutText: then the text
            text_length = struct.unpack(">I", self._input[4:8])[0]
            if text_length > MAX_CUT_TEXT:
                self.hang_up()  # not buffered whole: a clipboard this large is not one
                return False
            length += text_length
        message = self._take(length)
        if message is None:
            return False
        if kind == 0:
            self._pixel_format = message[4:20]
        elif kind == 3 and message[1] == 0:  # a full (not incremental) update request
            pixels = _encode(screen_rgb(self._vm_name), self._pixel_format)
            rectangle = struct.pack(">HHHHi", 0, 0, WIDTH, HEIGHT, 0)  # encoding 0: raw
            self._output.put_nowait(struct.pack(">BxH", 0, 1) + rectangle + pixels)
        return True

    async def close(self) -> None:
        self.hang_up()

    def hang_up(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._output.put_nowait(b"")
        self._release(self)


__all__ = ["HEIGHT", "VERSION", "WIDTH", "SimScreenSession", "screen_ppm", "screen_rgb"]
