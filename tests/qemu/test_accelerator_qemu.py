"""On a real daemon: the domain type is kvm only where a validation guest really boots under KVM,
and qemu (TCG) elsewhere, as here where /dev/kvm opens but nested KVM guests die. Says which ran."""

from __future__ import annotations

from typing import Any

from tests.qemu.conftest import KERNEL_FILE, Rig, console_shows, guest_spec
from virtplane.domain.accelerators import AcceleratorReason, choose
from virtplane.domain.resources import Accelerator


async def test_the_domain_type_follows_the_validation_boot(rig: Rig, drivers: dict[str, Any]) -> None:
    import libvirt

    a = drivers["a"]
    offer = await a.accelerator_offer()
    verdict = await a.validate_kvm(str(rig.base / "library" / KERNEL_FILE), 30.0) if offer.kvm else ""
    kvm_works = verdict == "" if offer.kvm else None
    choice = choose(Accelerator.AUTO, offer.kvm, kvm_works, "fallback")
    print(f"\naccelerator on this machine: {choice.used} ({choice.reason}: {verdict or choice.message})")
    a.use_accelerator(choice.used)
    spec = guest_spec(rig, "accel")
    await a.ensure_defined(spec)
    conn = libvirt.open(rig.hosts["a"].uri)
    try:
        defined = conn.lookupByName(spec.name).XMLDesc(0)
        assert conn.listAllDomains(0) and "vp-kvm-validation" not in [
            d.name() for d in conn.listAllDomains(0)
        ]
    finally:
        conn.close()
    expected = "kvm" if choice.used is Accelerator.KVM else "qemu"
    assert f"<domain type='{expected}'" in defined, defined[:200]
    await a.start(spec.name)  # the verdict was right: the guest boots under what was chosen
    await console_shows(rig, spec.name, "GUEST-UP", limit_s=60.0)
    if offer.kvm and not kvm_works:
        assert choice.reason == AcceleratorReason.KVM_BROKEN and "known point" in verdict, verdict
