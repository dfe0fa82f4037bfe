"""A call that a stopped daemon holds (``tests.held_calls``): closing the driver lets its
caller go at once, and a connection is closed only once no call is in it, whether the
driver closes it or finds it dead."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.held_calls import StoppableDaemon
from virtplane.drivers.errors import HostUnreachable
from virtplane.drivers.libvirt import LibvirtDriver

from .conftest import wait_for

LIMIT_S = 5.0  # guards the test against a hang only


def _closing() -> bool:
    """A connection is being closed (on a thread of its own) now."""
    return any(t.name.startswith("libvirt-close ") for t in threading.enumerate())


async def test_closing_lets_a_held_call_go_and_closes_the_connection_after_it() -> None:
    daemon = StoppableDaemon()
    driver = LibvirtDriver("test:///default", opener=daemon.open)
    await driver.connect()
    await driver.host_facts()
    daemon.stop()
    probe = asyncio.create_task(driver.host_facts())
    await wait_for(lambda: daemon.in_calls == 1)

    await asyncio.wait_for(driver.close(), LIMIT_S)
    with pytest.raises(HostUnreachable, match="closed while a call waited"):
        await asyncio.wait_for(probe, LIMIT_S)
    await wait_for(lambda: not _closing())
    assert daemon.closes == [], "not closed with a call in it"

    daemon.resume()
    await wait_for(lambda: daemon.closes == [0])


async def test_a_connection_found_dead_is_closed_once_its_held_call_returns() -> None:
    daemon = StoppableDaemon()
    driver = LibvirtDriver("test:///default", opener=daemon.open, reconnect_initial_s=60)
    await driver.connect()
    daemon.stop()
    held = asyncio.create_task(driver.host_facts())
    await wait_for(lambda: daemon.in_calls == 1)

    daemon.connections[0].cut()  # the keepalive gave up: the next call fails, the connection is lost
    with pytest.raises(HostUnreachable):
        await asyncio.wait_for(driver.list_domains(), LIMIT_S)
    assert not driver.connected
    await wait_for(lambda: not _closing())
    assert daemon.closes == [], "not closed with a call in it"

    daemon.resume()  # the held call returns (failing: its connection is dead)
    with pytest.raises(HostUnreachable):
        await asyncio.wait_for(held, LIMIT_S)
    await wait_for(lambda: daemon.closes == [0])
    await driver.close()
