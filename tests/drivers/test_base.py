"""The driver interface's own helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtplane.drivers.base import domain_name, vm_uid_of


@given(st.text())
def test_the_uid_comes_back_out_of_the_domain_name(uid: str) -> None:
    assert vm_uid_of(domain_name(uid)) == uid


@pytest.mark.parametrize(
    ("domain", "uid"),
    [
        ("virtplane-3f2c", "3f2c"),
        ("virtplane-virtplane-x", "virtplane-x"),  # only the one prefix goes
        ("virtplane-", ""),
        ("web-1", ""),  # a domain someone else defined on the host
        ("my-virtplane-x", ""),
        ("VIRTPLANE-x", ""),
        ("", ""),
    ],
)
def test_a_domain_that_is_not_ours_has_no_uid(domain: str, uid: str) -> None:
    assert vm_uid_of(domain) == uid
