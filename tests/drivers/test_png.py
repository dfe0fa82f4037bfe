"""Screenshots as PNG: a PPM from QEMU's screendump converted without an imaging library."""

from __future__ import annotations

import struct
import zlib

import pytest

from virtplane.drivers.errors import PermanentError
from virtplane.drivers.png import PNG_SIGNATURE, png_from_ppm, ppm_from_rgb


def _paeth(left: int, up: int, corner: int) -> int:
    guess = left + up - corner
    near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
    return near[2]


def _unfiltered(rows: bytes, width: int, height: int) -> tuple[bytes, set[int]]:
    """The RGB rows of a PNG's inflated data (PNG's five row filters undone), and the filters seen."""
    stride, pixels, filters = width * 3, bytearray(), set()
    previous = bytes(stride)
    for y in range(height):
        kind, line = rows[y * (stride + 1)], bytearray(rows[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        filters.add(kind)
        for x in range(stride):
            left = line[x - 3] if x >= 3 else 0
            up, corner = previous[x], previous[x - 3] if x >= 3 else 0
            predicted = (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]
            line[x] = (line[x] + predicted) & 0xFF
        pixels += line
        previous = bytes(line)
    return bytes(pixels), filters


def decoded(png: bytes, *, only_filter_none: bool = False) -> tuple[int, int, bytes]:
    """(width, height, RGB rows) of an 8-bit truecolour PNG (ours, or QEMU's own screendump),
    each chunk's CRC checked; ``only_filter_none``: the rows must be unfiltered, as ours are."""
    assert png.startswith(PNG_SIGNATURE)
    at, chunks = len(PNG_SIGNATURE), {}
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length : at + 12 + length])[0] == zlib.crc32(kind + data)
        chunks[kind] = chunks.get(kind, b"") + data  # IDAT may come in several chunks
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour, interlace) == (8, 2, 0) and b"IEND" in chunks
    rgb, filters = _unfiltered(zlib.decompress(chunks[b"IDAT"]), width, height)
    assert not only_filter_none or filters == {0}, filters
    return width, height, rgb


def test_a_ppm_becomes_a_png_of_the_same_pixels() -> None:
    rgb = bytes(range(256)) * 6  # 32 x 16 pixels, every byte value
    ppm = ppm_from_rgb(32, 16, rgb)
    assert decoded(png_from_ppm(ppm), only_filter_none=True) == (32, 16, rgb)
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
