"""Which libvirt URIs can carry a connection to a VM's screen (a file descriptor): a local UNIX
socket only; over ssh the daemon's descriptor is dropped by ssh's netcat and the whole
connection is lost (tests/qemu/test_transports_qemu.py), so the driver never asks there."""

from __future__ import annotations

import pytest

from virtplane.drivers.libvirt.display import passes_descriptors


@pytest.mark.parametrize(
    ("uri", "passes"),
    [
        ("qemu:///system", True),
        ("qemu:///session", True),
        ("qemu+unix:///system?socket=/tmp/vp/a/sock/libvirt-sock", True),
        ("qemu+ssh://root@kvm-1/system", False),
        ("qemu+ssh://root@127.0.0.1:2222/system?socket=/run/libvirt/libvirt-sock&proxy=netcat", False),
        ("qemu+tls://kvm-1/system", False),
        ("qemu+tcp://kvm-1/system", False),
        ("qemu://kvm-1/system", False),  # a host name without a transport is TLS
        ("qemu+libssh2://root@kvm-1/system", False),
    ],
)
def test_only_a_local_unix_socket_carries_a_screens_connection(uri: str, passes: bool) -> None:
    assert passes_descriptors(uri) is passes
