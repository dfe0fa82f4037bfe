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


async def test_the_control_plane_validates_the_host_and_defines_its_vms_with_the_verdict(qplane: Any) -> None:
    """Host a with spec.accelerator auto: its controller boots the validation guest itself; the
    Host says what it offers and uses and why, and a VM's domain is defined with it."""
    import libvirt

    from tests.conftest import eventually
    from virtplane.domain.conditions import HostCondition, get_condition
    from virtplane.domain.resources import Host, RunPolicy, VMPhase

    await qplane.add_host("a", accelerator=Accelerator.AUTO)
    host = qplane.store.get(Host, "a")
    status = host.status.accelerator
    condition = get_condition(host.status.conditions, HostCondition.ACCELERATOR)
    print(f"\nhost a: {condition.reason}: {condition.message}")
    assert status.used is qplane.accelerator, "the controller's verdict is the rig's"
    if qplane.accelerator is Accelerator.KVM:
        assert condition.reason == AcceleratorReason.KVM_VALIDATED
    elif Accelerator.KVM in status.offered:  # present but broken, as under nested virtualization here
        assert (condition.reason, status.kvm_works) == (AcceleratorReason.KVM_BROKEN, False)
        assert "known point" in condition.message and status.validated_for
    else:
        assert condition.reason == AcceleratorReason.KVM_ABSENT
    assert condition.status.value == "True"

    qplane.add_vm("accel", RunPolicy.ALWAYS_ON)
    await qplane.wait_settled("accel", VMPhase.RUNNING)
    await eventually(lambda: "GUEST-UP" in qplane.console("accel"), timeout=60)
    conn = libvirt.open(qplane.rig.hosts["a"].uri)
    try:
        defined = conn.lookupByName(qplane.domain("accel")).XMLDesc(0)
    finally:
        conn.close()
    expected = "kvm" if status.used is Accelerator.KVM else "qemu"
    assert f"<domain type='{expected}'" in defined, defined[:200]
