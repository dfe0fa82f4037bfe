"""What a host's guests run under, as a table: wanted x offered x validated x the broken-KVM setting."""

from __future__ import annotations

import pytest

from virtplane.domain.accelerators import AcceleratorReason, choose, needs_validation
from virtplane.domain.resources import Accelerator, AcceleratorStatus

A, K, T = Accelerator.AUTO, Accelerator.KVM, Accelerator.TCG
R = AcceleratorReason


@pytest.mark.parametrize(
    ("wanted", "offered", "works", "on_broken", "used", "reason"),
    [
        (A, True, True, "fallback", K, R.KVM_VALIDATED),
        (A, True, False, "fallback", T, R.KVM_BROKEN),
        (A, True, False, "refuse", None, R.KVM_BROKEN),
        (A, False, None, "refuse", T, R.KVM_ABSENT),  # no KVM is a TCG host, not a broken one
        (K, True, True, "fallback", K, R.KVM_VALIDATED),
        (K, True, False, "fallback", None, R.KVM_BROKEN),  # kvm or nothing
        (K, False, None, "fallback", None, R.KVM_ABSENT),
        (T, True, True, "fallback", T, R.OVERRIDDEN),
        (T, False, None, "refuse", T, R.OVERRIDDEN),
    ],
)
def test_the_accelerator_chosen(
    wanted: Accelerator,
    offered: bool,
    works: bool | None,
    on_broken: str,
    used: Accelerator | None,
    reason: str,
) -> None:
    choice = choose(wanted, offered, works, on_broken)
    assert (choice.used, choice.reason) == (used, reason), choice.message
    assert choice.message


@pytest.mark.parametrize(
    ("wanted", "offered", "recorded", "due"),
    [
        (A, True, None, True),
        (A, True, AcceleratorStatus(kvm_works=False, validated_for="v1"), False),  # cached verdict
        (A, True, AcceleratorStatus(kvm_works=True, validated_for="v0"), True),  # libvirt/QEMU changed
        (A, True, AcceleratorStatus(kvm_works=None, validated_for=""), True),
        (K, True, AcceleratorStatus(kvm_works=True, validated_for="v1"), False),
        (A, False, None, False),  # nothing to validate
        (T, True, None, False),  # overridden: never booted
    ],
)
def test_a_validation_boot_is_due_only_without_a_verdict_for_this_fingerprint(
    wanted: Accelerator, offered: bool, recorded: AcceleratorStatus | None, due: bool
) -> None:
    assert needs_validation(wanted, offered, "v1", recorded) is due
