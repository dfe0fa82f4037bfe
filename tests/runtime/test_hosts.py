"""Host connections (runtime/hosts.py) against a libvirt daemon that accepts the connection and
never answers, as a stopped or hung libvirtd does (``silent_daemon``, tests/conftest.py)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import HostUnreachable
from virtplane.runtime.hosts import HostConnections

libvirt_or_skip()

from virtplane.drivers.libvirt import LibvirtDriver  # noqa: E402

LIMIT_S = 10.0  # guards the test against a hang only


async def test_a_daemon_that_never_answers_is_unreachable_within_the_timeout(
    silent_daemon: tuple[str, socket.socket],
) -> None:
    uri, listener = silent_daemon
    opened: list[LibvirtDriver] = []

    def factory(uri: str) -> HypervisorDriver:
        opened.append(LibvirtDriver(uri))
        return opened[-1]

    hosts = HostConnections(factory, lambda _: None, connect_timeout_s=0.2)
    for _ in range(3):  # each caller is let go; the one open goes on meanwhile
        with pytest.raises(HostUnreachable, match=r"not answered within 0\.2s"):
            await asyncio.wait_for(hosts.get(uri), LIMIT_S)
    assert len(opened) == 1, "one open at a time per host"

    listener.close()  # the daemon goes: the open fails, and the next callers open anew
    for _ in range(3):
        with pytest.raises(HostUnreachable) as failed:
            await asyncio.wait_for(hosts.get(uri), LIMIT_S)
        assert "not answered" not in str(failed.value)
    assert len(opened) >= 3, "the failed open was forgotten: later callers open anew"
    reconnecting = [t.name for t in threading.enumerate() if t.name == f"libvirt-reconnect {uri}"]
    assert reconnecting == [], "a failed open leaves no driver reconnecting behind the scenes"
    await hosts.close_all()
