"""Sizes with units: ``4Gi``, ``512Mi``, ``20G`` or a plain number, into a field's own unit.

One parser for the API's models (a ``BeforeValidator`` on ``memory_mib``, ``size_gib``,
``capacity_gib``) and the CLI's flags. The stored fields keep their names and integer
shapes; only the input grows units.

The units are libvirt's and ``qemu-img``'s: ``K``/``M``/``G``/``T``/``P`` are powers of 1024
like ``Ki``...``Pi`` and ``KiB``...``PiB`` (``qemu-img create d.qcow2 20G`` makes 20 GiB),
and only ``KB``/``MB``/``GB``/``TB``/``PB`` are powers of 1000. A plain number, as a JSON
number or a string of digits, keeps its old meaning: the unit of the field. A size that
is not a whole number of the field's unit (``1.5Gi`` for a ``size_gib``, ``4GB`` for a
``memory_mib``) is refused rather than rounded: a silent rounding would give a disk or a
memory other than the one asked for.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

__all__ = ["GIB", "MIB", "UNITS_HELP", "SizeUnit", "accepts_units", "parse_size", "renamed_size"]

_BINARY = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
_DECIMAL = {"k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5}

_SIZE = re.compile(r"\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*")

MAX_TEXT = 64
"""A size longer than this is no size: refused before the regular expression sees it."""

UNITS_HELP = (
    "a number with a unit: Mi, Gi, Ti (or M, G, T, MiB, GiB: powers of 1024) or MB, GB, TB (powers of 1000)"
)


class SizeUnit(Enum):
    """A field's own unit: what a plain number means, and what a size is converted to."""

    MIB = ("MiB", 1024**2)
    GIB = ("GiB", 1024**3)

    def __init__(self, label: str, size: int) -> None:
        self.label = label
        self.bytes = size


MIB = SizeUnit.MIB
GIB = SizeUnit.GIB


def _bytes_per(unit: str) -> int | None:
    """Bytes in one ``unit`` (case-insensitive), or None for a word that is no unit."""
    lowered = unit.lower()
    if lowered in ("", "b"):
        return 1
    prefix, rest = lowered[0], lowered[1:]
    if prefix not in _BINARY:
        return None
    if rest in ("", "i", "ib"):
        return _BINARY[prefix]
    if rest == "b":
        return _DECIMAL[prefix]
    return None


def parse_size(text: str, unit: SizeUnit) -> int:
    """``text`` in whole ``unit``s: ``parse_size("4Gi", MIB) == 4096``; ``"20"`` is 20 ``unit``s.

    Raises ValueError, saying why, for anything else."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"not a size: longer than {MAX_TEXT} characters")
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: use {UNITS_HELP}, or a whole number of {unit.label}")
    if not match["unit"]:
        if "." in match["number"]:
            raise ValueError(f"{text!r} is not a whole number of {unit.label}")
        return int(match["number"])
    per = _bytes_per(match["unit"])
    if per is None:
        raise ValueError(f"{text!r}: unknown unit {match['unit']!r}; use {UNITS_HELP}")
    try:
        total = Decimal(match["number"]) * per
    except InvalidOperation as error:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"{text!r} is not a size") from error
    whole, rest = divmod(total, unit.bytes)
    if rest:
        raise ValueError(
            f"{text!r} is not a whole number of {unit.label} ({total / unit.bytes:.2f} {unit.label}); "
            f"give a size that is"
        )
    return int(whole)


def accepts_units(unit: SizeUnit, *, ge: int, le: int) -> BeforeValidator:
    """The metadata of an integer size field in ``unit``s that also takes a size with a unit:
    ``memory_mib: Annotated[int, accepts_units(MIB, ge=16, le=...)] = Field(ge=16, le=...)``.

    A string becomes whole ``unit``s; anything else (a JSON number) goes on to the field's
    own validation unchanged. The OpenAPI document shows the field as the number (with its
    bounds) or the string (with the units)."""

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            return parse_size(value, unit)
        return value

    number = Annotated[int, Field(ge=ge, le=le, description=f"{unit.label}")]
    text = Annotated[str, Field(description=f"A size with a unit, e.g. 4Gi: {UNITS_HELP}.")]
    return BeforeValidator(convert, json_schema_input_type=number | text)


def renamed_size(data: Any, short: str, field: str) -> Any:
    """``memory: 4Gi`` for ``memory_mib``: the input ``data`` (a model's raw input, for a
    ``model_validator(mode="before")``) with the unit-less name ``short`` moved to ``field``.
    Both at once is an error: they would say the same thing twice, perhaps differently."""
    if not isinstance(data, dict) or short not in data:
        return data
    if field in data:
        raise ValueError(f"{short} and {field} are the same size: give one of them")
    moved = dict(data)
    moved[field] = moved.pop(short)
    return moved
