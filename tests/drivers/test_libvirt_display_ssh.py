"""The screen of a host reached over qemu+ssh (``display_ssh``): the ssh command is the one
libvirt's own connection uses (the URI's command, user, port, key, host-key policy and
netcat), the remote path is quoted for the remote shell, and such a host's domains get a VNC
UNIX socket (never a port) while other hosts' listen nowhere."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.drivers.test_libvirt_domain_xml import spec
from virtplane.drivers.libvirt.display_ssh import is_ssh, ssh_argv
from virtplane.drivers.libvirt.domain_xml import build_domain_xml
from virtplane.drivers.libvirt.flavor import flavor_for


def test_the_ssh_command_takes_the_uris_options() -> None:
    uri = "qemu+ssh://root@kvm-1.example:2222/system?keyfile=/etc/virtplane/id_ed25519&command=/usr/local/bin/ssh&netcat=/bin/nc.openbsd"
    assert ssh_argv(uri, "/var/lib/libvirt/qemu/domain-3-vp x/vnc.sock") == [
        "/usr/local/bin/ssh", "-p", "2222", "-l", "root", "-i", "/etc/virtplane/id_ed25519",
        "-T", "-e", "none", "-o", "BatchMode=yes", "--", "kvm-1.example",
        "/bin/nc.openbsd -U '/var/lib/libvirt/qemu/domain-3-vp x/vnc.sock'",
    ]  # fmt: skip


def test_no_verify_is_libvirts_and_defaults_are_sshs() -> None:
    argv = ssh_argv("qemu+ssh://kvm-2/system?no_verify=1", "/run/vnc.sock")
    assert argv == [
        "ssh", "-o", "StrictHostKeyChecking=no", "-T", "-e", "none", "-o", "BatchMode=yes", "--", "kvm-2",
        "nc -U /run/vnc.sock",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("uri", "ssh"),
    [
        ("qemu+ssh://kvm-1/system", True),
        ("qemu+libssh2://kvm-1/system", True),
        ("qemu:///system", False),
        ("qemu+tls://kvm-1/system", False),
        ("qemu+unix:///system", False),
    ],
)
def test_only_ssh_hosts_give_their_domains_a_vnc_socket(uri: str, ssh: bool) -> None:
    assert is_ssh(uri) is ssh
    options = flavor_for(uri).xml
    assert options.screen_socket is ssh


def test_the_vnc_server_listens_on_a_socket_or_nowhere_never_a_port() -> None:
    for uri, listen in (("qemu+ssh://kvm-1/system", "socket"), ("qemu:///system", "none")):
        root = ET.fromstring(build_domain_xml(spec(), flavor_for(uri).xml))
        (graphics,) = root.findall("devices/graphics")
        assert [element.get("type") for element in graphics.findall("listen")] == [listen]
        assert graphics.get("port") is None and graphics.get("autoport") is None


def test_a_domain_without_a_vnc_socket_says_its_screen_shows_after_its_next_start() -> None:
    libvirt = pytest.importorskip("libvirt")
    from virtplane.drivers.errors import Unsupported
    from virtplane.drivers.libvirt.display_ssh import vnc_socket
    from virtplane.drivers.libvirt.domain import LibvirtDomain

    conn = libvirt.open("test:///default")  # its running domain "test" has no graphics
    try:
        with pytest.raises(Unsupported, match="after its next start"):
            vnc_socket(LibvirtDomain.lookup(conn, "test"))
    finally:
        conn.close()
