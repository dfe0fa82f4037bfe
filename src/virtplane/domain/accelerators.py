"""Which accelerator a host's guests run under: KVM where the host offers it and a validation
guest really boots under it, else TCG (QEMU's emulator), or no guests at all.

Pure: the host controller asks the driver what the host offers (libvirt's capabilities),
whether a validation guest reached its known point under KVM (only when no verdict is
recorded for this host's libvirt, QEMU and host), and records what ``choose`` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from virtplane.domain.resources import Accelerator, AcceleratorStatus
from virtplane.domain.vocabulary import KvmBroken

__all__ = [
    "AcceleratorChoice",
    "AcceleratorReason",
    "choose",
    "needs_validation",
]


class AcceleratorReason:
    """The reasons of the Host condition ``Accelerator``."""

    KVM_VALIDATED = "KVMValidated"
    KVM_BROKEN = "KVMBroken"
    KVM_ABSENT = "KVMAbsent"
    OVERRIDDEN = "Overridden"


@dataclass(frozen=True)
class AcceleratorChoice:
    used: Accelerator | None  # None: the host takes no guests
    reason: str
    message: str


def needs_validation(
    wanted: Accelerator, kvm_offered: bool, fingerprint: str, recorded: AcceleratorStatus | None
) -> bool:
    """A validation boot is due when KVM may be used and no verdict holds for this fingerprint."""
    if wanted is Accelerator.TCG or not kvm_offered:
        return False
    return recorded is None or recorded.kvm_works is None or recorded.validated_for != fingerprint


def choose(
    wanted: Accelerator, kvm_offered: bool, kvm_works: bool | None, on_broken: str
) -> AcceleratorChoice:
    """What the host's guests run under. ``spec.accelerator: kvm`` is KVM or no guests;
    ``auto`` falls back to TCG where KVM is absent, and where it is broken as
    host.accelerator.kvm_broken says (``fallback`` or ``refuse``)."""
    if wanted is Accelerator.TCG:
        return AcceleratorChoice(Accelerator.TCG, AcceleratorReason.OVERRIDDEN, "spec.accelerator is tcg")
    if not kvm_offered:
        message = "libvirt offers no kvm domains on this host"
        if wanted is Accelerator.KVM:
            return AcceleratorChoice(
                None, AcceleratorReason.KVM_ABSENT, f"{message}; spec.accelerator is kvm: no guests"
            )
        return AcceleratorChoice(
            Accelerator.TCG, AcceleratorReason.KVM_ABSENT, f"{message}: guests run under TCG"
        )
    if kvm_works:
        return AcceleratorChoice(
            Accelerator.KVM, AcceleratorReason.KVM_VALIDATED, "a validation guest booted under KVM"
        )
    message = "KVM is offered but a validation guest did not boot under it"
    if wanted is Accelerator.KVM or on_broken == KvmBroken.REFUSE:
        why = (
            "spec.accelerator is kvm"
            if wanted is Accelerator.KVM
            else "host.accelerator.kvm_broken is refuse"
        )
        return AcceleratorChoice(None, AcceleratorReason.KVM_BROKEN, f"{message}; {why}: no guests")
    return AcceleratorChoice(
        Accelerator.TCG, AcceleratorReason.KVM_BROKEN, f"{message}: guests run under TCG"
    )
