"""The libvirt driver's reading of a host's accelerator offer, and its validation guest's definition."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from virtplane.drivers.libvirt.accelerator import (
    VALIDATION_DOMAIN,
    host_uuid,
    offered_domain_types,
    validation_xml,
)

CAPS = """<capabilities><host><uuid>7a1b</uuid></host>
<guest><os_type>hvm</os_type><arch name='x86_64'><domain type='qemu'/><domain type='kvm'/></arch></guest>
<guest><os_type>hvm</os_type><arch name='i686'><domain type='qemu'/><domain type='xen'/></arch></guest>
</capabilities>"""


def test_the_offer_is_the_x86_64_hvm_domain_types_of_the_capabilities() -> None:
    assert offered_domain_types(CAPS) == {"qemu", "kvm"}
    assert offered_domain_types(CAPS.replace("<domain type='kvm'/>", "")) == {"qemu"}
    assert host_uuid(CAPS) == "7a1b"


def test_the_validation_guest_is_a_kvm_kernel_without_root_that_ends_on_its_panic() -> None:
    root = ET.fromstring(validation_xml("/boot/vmlinuz"))
    assert root.get("type") == "kvm" and root.findtext("name") == VALIDATION_DOMAIN
    assert not VALIDATION_DOMAIN.startswith("virtplane-"), "never taken for a VM's domain"
    assert root.findtext("os/kernel") == "/boot/vmlinuz" and root.find("os/initrd") is None
    assert "panic=-1" in (root.findtext("os/cmdline") or "") and root.findtext("on_reboot") == "destroy"
    assert root.find("devices/disk") is None


async def test_libvirts_test_driver_offers_no_kvm() -> None:
    from tests.conftest import libvirt_or_skip
    from virtplane.drivers.libvirt import LibvirtDriver

    libvirt_or_skip()
    driver = LibvirtDriver("test:///default")
    await driver.connect()
    try:
        assert (await driver.accelerator_offer()).kvm is False
    finally:
        await driver.close()
