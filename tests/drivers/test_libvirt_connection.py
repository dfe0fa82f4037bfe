"""Connection loss and recovery: HOST_DOWN while away, reconnect with backoff, HOST_UP when back.

The "network" is a proxy around a real test-driver connection that the test
can cut: calls then fail and the connection reports itself dead, as a remote
connection does after a keepalive timeout.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.drivers.base import DomainEvent, DomainEventType, DomainSpec, DomainState, domain_name
from virtplane.drivers.errors import HostUnreachable

from .conftest import wait_for

libvirt = libvirt_or_skip()

from virtplane.drivers.libvirt import LibvirtDriver  # noqa: E402


class Network:
    """Opens test:///default through a switch; while down, opens fail and open connections die."""

    def __init__(self) -> None:
        self.up = True
        self.opens = 0
        self.lock = threading.Lock()

    def open(self, uri: str) -> Any:
        with self.lock:
            self.opens += 1
            if not self.up:
                raise libvirt.libvirtError("unable to connect: host is down")
        return CuttableConnection(libvirt.open("test:///default"), self)


class CuttableConnection:
    def __init__(self, conn: Any, network: Network) -> None:
        self._conn = conn
        self._network = network
        self._cut = False

    def cut(self) -> None:
        self._cut = True

    def isAlive(self) -> int:
        return 0 if self._cut else 1

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._conn, name)
        if not callable(attribute) or name in ("close", "unregisterCloseCallback"):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._cut:
                raise libvirt.libvirtError("End of file while reading data: Input/output error")
            return attribute(*args, **kwargs)

        return call


async def test_loss_and_recovery() -> None:
    network = Network()
    connections: list[CuttableConnection] = []

    def opener(uri: str) -> Any:
        conn = network.open(uri)
        connections.append(conn)
        return conn

    events: list[DomainEvent] = []
    driver = LibvirtDriver("test:///default", opener=opener, reconnect_initial_s=0.01, reconnect_max_s=0.05)
    driver.set_event_sink(events.append)
    await driver.connect()
    assert driver.connected
    spec = DomainSpec(name=domain_name("conn-test"), vm_name="c", vm_uid="conn-test", cpu=1, memory_mib=64)
    await driver.ensure_defined(spec)
    try:
        network.up = False
        connections[-1].cut()
        with pytest.raises(HostUnreachable):
            await driver.list_domains()
        assert not driver.connected
        assert [e.type for e in events if e.domain == ""] == [
            DomainEventType.HOST_UP,
            DomainEventType.HOST_DOWN,
        ]
        with pytest.raises(HostUnreachable):
            await driver.start(spec.name)  # refused at once while away
        opens_while_down = network.opens
        await wait_for(lambda: network.opens >= opens_while_down + 3)  # it keeps trying, with backoff

        network.up = True
        await wait_for(lambda: driver.connected)
        await wait_for(lambda: [e.type for e in events if e.domain == ""][-1] is DomainEventType.HOST_UP)
        info = await driver.get_info(spec.name)
        assert info is not None and info.state is DomainState.SHUTOFF
    finally:
        await driver.undefine(spec.name)
        await driver.close()


async def test_first_connect_fails_then_the_host_comes_up_by_itself() -> None:
    network = Network()
    network.up = False
    events: list[DomainEvent] = []
    driver = LibvirtDriver(
        "test:///default", opener=network.open, reconnect_initial_s=0.01, reconnect_max_s=0.02
    )
    driver.set_event_sink(events.append)
    with pytest.raises(HostUnreachable):
        await driver.connect()
    assert not driver.connected
    network.up = True
    await wait_for(lambda: driver.connected)
    assert [e.type for e in events] == [DomainEventType.HOST_UP]
    await driver.close()
    assert not driver.connected


async def test_close_stops_reconnecting() -> None:
    network = Network()
    network.up = False
    driver = LibvirtDriver(
        "test:///default", opener=network.open, reconnect_initial_s=0.01, reconnect_max_s=0.01
    )
    with pytest.raises(HostUnreachable):
        await driver.connect()
    await wait_for(lambda: network.opens >= 2)
    await driver.close()
    opens = network.opens
    network.up = True
    # The reconnect thread has been joined by close(); nothing opens behind our back any more.
    assert network.opens == opens
    assert not driver.connected


async def test_close_returns_while_a_reconnect_waits_on_a_host_that_never_answers(
    silent_daemon: tuple[str, Any], tmp_path: Any
) -> None:
    """The reconnect's open holds no lock: closing the driver (the control plane dropping a
    lost host) does not wait for an open that a hung daemon never answers."""
    uri, _ = silent_daemon
    refused = uri.replace(str(tmp_path / "libvirt-sock"), str(tmp_path / "nobody-here"))
    opens = []

    def opener(_: str) -> Any:
        opens.append(uri)
        return libvirt.open(refused if len(opens) == 1 else uri)  # refused first, then silent

    driver = LibvirtDriver(uri, opener=opener, reconnect_initial_s=0.01, reconnect_max_s=0.01)
    with pytest.raises(HostUnreachable):
        await driver.connect()
    await wait_for(lambda: len(opens) >= 2)  # the reconnect is in the silent daemon's open
    await asyncio.wait_for(driver.close(), 5.0)
    assert not driver.connected
