"""The simulated guests' screens: a small RFB 3.8 server per session (tests/api/test_vnc.py
drives it through the API; these are the parts a well-behaved viewer never shows)."""

from __future__ import annotations

import asyncio
import struct

from virtplane.drivers.sim._display import HEIGHT, WIDTH, SimScreenSession, screen_rgb

MESSAGE_WAIT_S = 5.0  # a guard against a hang: every answer is put on the queue synchronously


async def answered(session: SimScreenSession, data: bytes) -> bytes:
    await session.write(data)
    return await asyncio.wait_for(session.read(), MESSAGE_WAIT_S)


async def initialised(name: str = "web-1") -> SimScreenSession:
    session = SimScreenSession(name, lambda _: None)
    assert await session.read() == b"RFB 003.008\n"
    assert await answered(session, b"RFB 003.008\n") == b"\x01\x01"
    assert await answered(session, b"\x01") == b"\0\0\0\0"
    init = await answered(session, b"\x01")
    assert struct.unpack(">HH", init[:4]) == (WIDTH, HEIGHT)
    return session


async def test_a_viewer_that_wants_a_password_is_told_why_and_hung_up_on() -> None:
    session = SimScreenSession("web-1", lambda _: None)
    await session.read()
    await answered(session, b"RFB 003.008\n")
    failure = await answered(session, b"\x02")  # VNC authentication
    (status, length), reason = struct.unpack(">II", failure[:8]), failure[8:]
    assert (status, reason) == (1, b"only security type None is offered") and length == len(reason)
    assert await session.read() == b""


async def test_updates_come_in_the_viewers_pixel_format_and_only_when_asked_in_full() -> None:
    session = await initialised()
    # 16 bits per pixel, big-endian, 5-6-5: red in the top bits
    await session.write(b"\0\0\0\0" + struct.pack(">BBBBHHHBBB3x", 16, 16, 1, 1, 31, 63, 31, 11, 5, 0))
    await session.write(struct.pack(">BBHHHH", 3, 1, 0, 0, WIDTH, HEIGHT))  # incremental: nothing changed
    update = await answered(session, struct.pack(">BBHHHH", 3, 0, 0, 0, WIDTH, HEIGHT))
    assert update[:4] == b"\0\0\0\x01", "one rectangle, the full request's only"
    assert struct.unpack(">HHHHi", update[4:16]) == (0, 0, WIDTH, HEIGHT, 0)
    red, green, blue = screen_rgb("web-1")[:3]
    first = (red * 31 // 255) << 11 | (green * 63 // 255) << 5 | blue * 31 // 255
    assert update[16:18] == first.to_bytes(2, "big") and len(update) == 16 + WIDTH * HEIGHT * 2
    await session.close()
    assert await session.read() == b"", "the incremental request got no answer: the end comes next"


async def test_an_oversized_clipboard_or_an_unknown_message_ends_the_session() -> None:
    session = await initialised()
    await session.write(struct.pack(">B3xI", 6, 64 * 1024 * 1024) + b"x" * 10)
    assert await asyncio.wait_for(session.read(), MESSAGE_WAIT_S) == b""
    other = await initialised()
    await other.write(b"\xfe")
    assert await asyncio.wait_for(other.read(), MESSAGE_WAIT_S) == b""
