"""Sizes with units, as a table: what each input becomes in MiB and in GiB, and why a bad one is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from virtplane.domain.resources import StoragePoolSpec, VirtualMachineSpec, VolumeSpec
from virtplane.domain.sizes import GIB, MIB, SizeUnit, parse_size


@pytest.mark.parametrize(
    ("text", "unit", "whole"),
    [
        ("4096", MIB, 4096),  # a plain number keeps the field's unit
        ("20", GIB, 20),
        ("4Gi", MIB, 4096),
        ("512Mi", MIB, 512),
        ("20G", GIB, 20),  # libvirt's and qemu-img's G: GiB
        ("20GiB", GIB, 20),
        ("1.5Gi", MIB, 1536),
        ("2Ti", GIB, 2048),
        ("1t", GIB, 1024),  # units in any case
        (" 8 Gi ", MIB, 8192),
        ("1000MB", MIB, None),  # 953.67 MiB: not whole
        ("4GB", MIB, None),
        ("1.5Gi", GIB, None),
        ("512Mi", GIB, None),
        ("1048576Ki", MIB, 1024),
        ("2097152", MIB, 2097152),
        ("3.5", MIB, None),  # a plain number of MiB is whole
        ("4Xi", MIB, None),
        ("Gi", MIB, None),
        ("-4Gi", MIB, None),
        ("4 Gibibytes", MIB, None),
        ("", MIB, None),
        ("9" * 65, MIB, None),
    ],
)
def test_a_size_in_the_fields_unit(text: str, unit: SizeUnit, whole: int | None) -> None:
    if whole is None:
        with pytest.raises(ValueError, match=r"\S") as refused:
            parse_size(text, unit)
        assert repr(text)[:20] in str(refused.value) or "longer than" in str(refused.value)
    else:
        assert parse_size(text, unit) == whole


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("4Xi", "unknown unit 'Xi'"),
        ("4GB", "not a whole number of MiB (3814.70 MiB)"),
        ("four", "is not a size: use a number with a unit"),
    ],
)
def test_a_refused_size_says_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=r".") as refused:
        parse_size(text, MIB)
    assert reason in str(refused.value)


def test_the_models_take_units_and_keep_their_integer_fields() -> None:
    assert VirtualMachineSpec.model_validate({"memory_mib": "4Gi"}).memory_mib == 4096
    assert VirtualMachineSpec.model_validate({"memory": "4Gi"}).memory_mib == 4096
    assert VirtualMachineSpec.model_validate({"memory_mib": 2048}).memory_mib == 2048
    assert VolumeSpec.model_validate({"pool": "p", "size": "1Ti"}).size_gib == 1024
    assert (
        StoragePoolSpec.model_validate({"kind": "shared", "cluster": "c", "capacity_gib": "2T"}).capacity_gib
        == 2048
    )
    dumped = VirtualMachineSpec.model_validate({"memory": "1Gi"}).model_dump()
    assert dumped["memory_mib"] == 1024 and "memory" not in dumped
    with pytest.raises(ValidationError, match="same size: give one of them"):
        VirtualMachineSpec.model_validate({"memory": "4Gi", "memory_mib": 4096})
    with pytest.raises(ValidationError, match="greater than or equal to 16"):
        VirtualMachineSpec.model_validate({"memory_mib": "8Mi"})  # the bounds still hold, in MiB
