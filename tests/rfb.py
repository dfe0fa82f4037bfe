"""A minimal RFB (VNC) client over the server's WebSocket or a TCP port, for the tests: the handshake a
viewer does (security type None, as the server's screens offer) and one full raw update."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from websockets.sync.client import ClientConnection

# what noVNC asks for: 32 bits per pixel, little-endian, red in the low byte
CLIENT_FORMAT = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 0, 8, 16)


class Rfb:
    """RFB's byte stream, read exactly, over a WebSocket (binary frames) or a TCP socket."""

    def __init__(self, recv: Callable[[], bytes], send: Callable[[bytes], None]) -> None:
        self._recv = recv
        self.send = send
        self._buffer = b""
        self.received: list[bytes] = []  # every chunk, as it came

    @classmethod
    def over_websocket(cls, ws: ClientConnection) -> Rfb:
        def recv() -> bytes:
            data = ws.recv(timeout=30)
            assert isinstance(data, bytes), "RFB travels in binary frames"
            return data

        return cls(recv, ws.send)

    @classmethod
    def over_socket(cls, sock: socket.socket) -> Rfb:
        sock.settimeout(30)  # a guard against a hang, not a measure
        return cls(lambda: sock.recv(65536), sock.sendall)

    def recv_exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            data = self._recv()
            assert data, f"the stream ended {count - len(self._buffer)} bytes short"
            self.received.append(data)
            self._buffer += data
        taken, self._buffer = self._buffer[:count], self._buffer[count:]
        return taken


@dataclass(frozen=True)
class Screen:
    width: int
    height: int
    name: str
    rgb: bytes  # R, G, B per pixel, row by row


def handshake(rfb: Rfb) -> tuple[int, int, str]:
    """Version, security (None) and init: the screen's width, height and name."""
    assert rfb.recv_exactly(12) == b"RFB 003.008\n"
    rfb.send(b"RFB 003.008\n")
    (count,) = rfb.recv_exactly(1)
    offered = rfb.recv_exactly(count)
    assert 1 in offered, f"security type None offered: {list(offered)}"
    rfb.send(b"\x01")
    assert rfb.recv_exactly(4) == b"\x00\x00\x00\x00", "security result: OK"
    rfb.send(b"\x01")  # shared
    width, height = struct.unpack(">HH", rfb.recv_exactly(4))
    rfb.recv_exactly(16)  # the server's pixel format
    (name_length,) = struct.unpack(">I", rfb.recv_exactly(4))
    return width, height, rfb.recv_exactly(name_length).decode()


def full_screen(rfb: Rfb) -> Screen:
    """Handshake, then one full update in raw encoding, as RGB."""
    width, height, name = handshake(rfb)
    rfb.send(b"\x00\x00\x00\x00" + CLIENT_FORMAT)
    rfb.send(struct.pack(">BBhi", 2, 0, 1, 0))  # SetEncodings: raw only
    rfb.send(struct.pack(">BBHHHH", 3, 0, 0, 0, width, height))  # a full update
    pixels = bytearray(width * height * 3)
    covered = 0
    while covered < width * height:
        kind, _pad, rectangles = struct.unpack(">BBH", rfb.recv_exactly(4))
        assert kind == 0, f"a framebuffer update, not message {kind}"
        for _ in range(rectangles):
            x, y, w, h, encoding = struct.unpack(">HHHHi", rfb.recv_exactly(12))
            assert encoding == 0, f"raw encoding, not {encoding}"
            data = rfb.recv_exactly(w * h * 4)
            for row in range(h):
                for column in range(w):
                    at = (row * w + column) * 4
                    offset = ((y + row) * width + x + column) * 3
                    pixels[offset : offset + 3] = data[at : at + 3]
            covered += w * h
    return Screen(width, height, name, bytes(pixels))
