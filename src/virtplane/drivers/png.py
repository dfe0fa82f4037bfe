"""Screens as PNG: libvirt's screenshots come as PPM (what QEMU's ``screendump`` writes), which
browsers do not show, so the API converts them.

A PNG of an RGB picture is a signature and three chunks (IHDR, one IDAT holding the zlib-
deflated rows, each after a filter byte, IEND), so this is done here with ``zlib`` rather than
with an imaging library (Pillow) that would add a native dependency for one conversion.
"""

from __future__ import annotations

import struct
import zlib

from virtplane.drivers.errors import PermanentError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PIXELS = 8192 * 8192  # a larger "screen" is not one (QEMU's largest display is far smaller)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_from_rgb(width: int, height: int, rgb: bytes) -> bytes:
    """A PNG of ``width`` x ``height`` pixels given as 8-bit R, G, B triples, row by row."""
    stride = width * 3
    if width < 1 or height < 1 or len(rgb) != stride * height:
        raise PermanentError(f"{len(rgb)} bytes are not a {width}x{height} RGB picture")
    rows = b"".join(b"\x00" + rgb[y * stride : (y + 1) * stride] for y in range(height))  # filter: none
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, truecolour, no interlace
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows, 6))
        + _chunk(b"IEND", b"")
    )


def _ppm_fields(data: bytes, count: int) -> tuple[list[int], int]:
    """The header's first ``count`` numbers and where the pixels start (comments skipped)."""
    fields: list[int] = []
    at = 2
    while len(fields) < count:
        while at < len(data) and data[at : at + 1].isspace():
            at += 1
        if data[at : at + 1] == b"#":
            at = data.index(b"\n", at) if b"\n" in data[at:] else len(data)
            continue
        start = at
        while at < len(data) and data[at : at + 1].isdigit():
            at += 1
        if start == at:
            raise PermanentError("the screenshot is not a binary PPM (P6) picture")
        fields.append(int(data[start:at]))
    return fields, at + 1  # one whitespace byte ends the header


def png_from_ppm(ppm: bytes) -> bytes:
    """A binary PPM (P6, 8 bits per channel) as PNG."""
    if not ppm.startswith(b"P6"):
        raise PermanentError("the screenshot is not a binary PPM (P6) picture")
    (width, height, maxval), start = _ppm_fields(ppm, 3)
    if maxval != 255 or not 0 < width * height <= MAX_PIXELS:
        raise PermanentError(f"a {width}x{height} PPM with maximum {maxval} is not a screen")
    return png_from_rgb(width, height, ppm[start : start + width * height * 3])


def ppm_from_rgb(width: int, height: int, rgb: bytes) -> bytes:
    """What QEMU's screendump writes for the same pixels (the simulator's screenshots)."""
    return f"P6\n{width} {height}\n255\n".encode() + rgb


__all__ = ["PNG_SIGNATURE", "png_from_ppm", "png_from_rgb", "ppm_from_rgb"]
