"""Screenshots as PNG: a PPM from QEMU's screendump converted without an imaging library."""

from __future__ import annotations

import struct
import zlib

import pytest

from virtplane.drivers.errors import PermanentError
from virtplane.drivers.png import PNG_SIGNATURE, png_from_ppm, ppm_from_rgb


def decoded(png: bytes) -> tuple[int, int, bytes]:
    """(width, height, RGB rows) of a PNG of the shape ``png_from_rgb`` writes, each chunk's CRC checked."""
    assert png.startswith(PNG_SIGNATURE)
    at, chunks = len(PNG_SIGNATURE), {}
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length : at + 12 + length])[0] == zlib.crc32(kind + data)
        chunks[kind] = data
        at += 12 + length
    width, height, depth, colour, _, _, _ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour) == (8, 2) and b"IEND" in chunks
    rows = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + width * 3
    assert all(rows[y * stride] == 0 for y in range(height))  # filter "none" on every row
    return width, height, b"".join(rows[y * stride + 1 : (y + 1) * stride] for y in range(height))


def test_a_ppm_becomes_a_png_of_the_same_pixels() -> None:
    rgb = bytes(range(256)) * 6  # 32 x 16 pixels, every byte value
    ppm = ppm_from_rgb(32, 16, rgb)
    assert decoded(png_from_ppm(ppm)) == (32, 16, rgb)
    # QEMU may put a comment in the header; any whitespace separates its numbers
    commented = b"P6\n# screendump\n32  16\n255\n" + rgb
    assert decoded(png_from_ppm(commented)) == (32, 16, rgb)


@pytest.mark.parametrize(
    "ppm",
    [
        b"P3\n1 1\n255\n0 0 0\n",  # text PPM
        b"P6\n1 1\n65535\n" + b"\0" * 6,  # 16 bits a channel
        b"P6\n2 2\n255\n" + b"\0" * 5,  # cut short
        b"P6\nx 1\n255\n",
        b"P6\n0 1\n255\n",
    ],
)
def test_what_is_not_an_8_bit_binary_ppm_is_refused(ppm: bytes) -> None:
    with pytest.raises(PermanentError):
        png_from_ppm(ppm)
