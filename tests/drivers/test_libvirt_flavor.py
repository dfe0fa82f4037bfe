"""What differs for libvirt's test driver is one value, chosen once from the URI."""

from __future__ import annotations

from dataclasses import replace

import pytest

from virtplane.drivers.libvirt.flavor import QEMU, TEST_DRIVER, HypervisorFlavor, flavor_for

OVER_SSH = replace(QEMU, xml=replace(QEMU.xml, screen_socket=True))
"""A host reached over ssh: its screens are reached through a VNC socket over ssh (display_ssh)."""


@pytest.mark.parametrize(
    ("uri", "flavor"),
    [
        ("test:///default", TEST_DRIVER),
        ("test:///tmp/node.xml", TEST_DRIVER),
        ("qemu:///system", QEMU),
        ("qemu+ssh://host-1/system", OVER_SSH),
        ("qemu+tls://host-1/system", QEMU),
        ("testbed+ssh://host-1/system", OVER_SSH),  # only the scheme "test" is libvirt's test driver
    ],
)
def test_the_flavor_follows_the_uri_scheme(uri: str, flavor: HypervisorFlavor) -> None:
    assert flavor_for(uri) == flavor


def test_the_domain_type_is_asked_of_qemu_hosts_only() -> None:
    assert flavor_for("qemu:///system", "kvm").xml.domain_type == "kvm"
    assert flavor_for("qemu:///system").xml.domain_type == "qemu"
    assert flavor_for("test:///default", "kvm").xml.domain_type == "test"  # it runs only its own


def test_the_driver_asks_the_flavor() -> None:
    pytest.importorskip("libvirt")
    from virtplane.drivers.libvirt import LibvirtDriver

    for uri in ("test:///default", "qemu+ssh://host-1/system"):
        driver = LibvirtDriver(uri, domain_type="kvm")
        assert driver.flavor == flavor_for(uri, "kvm")
        assert driver.capabilities == driver.flavor.capabilities
