"""The simulated guests' line console: what it answers, and that it lives exactly as long as the
domain's instance on that host (the contract suite checks busy, closed, off and unknown)."""

from __future__ import annotations

import asyncio

import pytest

from virtplane.drivers.base import ConsoleStream, DomainSpec, DomainState, MigrationRequest, domain_name
from virtplane.drivers.errors import HostUnreachable
from virtplane.drivers.sim import FaultKind, SimCloud, SimDriver

PROMPT = b"root@web-1:~# "


@pytest.fixture
async def cloud() -> SimCloud:
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, time_scale=100.0, migration_tick_s=0.002)
    sim.add_host("h1", vcpus=8, memory_mib=8192)
    sim.add_host("h2", vcpus=8, memory_mib=8192)
    return sim


async def connected(cloud: SimCloud, name: str) -> SimDriver:
    driver = cloud.driver(f"sim://{name}")
    await driver.connect()
    return driver


async def running(driver: SimDriver) -> str:
    spec = DomainSpec(name=domain_name("u1"), vm_name="web-1", vm_uid="u1", cpu=1, memory_mib=512)
    await driver.ensure_defined(spec)
    await driver.start(spec.name)
    while (info := await driver.get_info(spec.name)) is None or info.state is not DomainState.RUNNING:
        await asyncio.sleep(0.005)
    return spec.name


async def until(console: ConsoleStream, text: bytes) -> bytes:
    seen = b""
    while text not in seen:
        data = await asyncio.wait_for(console.read(), 5)
        assert data, f"the console ended before {text!r}; it sent {seen!r}"
        seen += data
    return seen


async def ended(console: ConsoleStream) -> bytes:
    """Everything up to the end of the stream (fails if it does not end)."""
    seen = b""
    while data := await asyncio.wait_for(console.read(), 5):
        seen += data
    return seen


async def test_a_banner_then_each_line_is_echoed_and_answered(cloud: SimCloud) -> None:
    h1 = await connected(cloud, "h1")
    console = await h1.open_console(await running(h1))
    assert b"virtplane simulated guest web-1" in await until(console, PROMPT)
    await console.write(b"hostname\r")
    assert await until(console, PROMPT) == b"hostname\r\nweb-1\r\n" + PROMPT
    await console.write(b"echo hi thare\x7f\x7f\x7fere\r\n")  # backspaces rub out; CR LF is one end
    assert (await until(console, PROMPT)).endswith(b"\r\nhi there\r\n" + PROMPT)
    await console.write(b"uname -a\n")
    assert b"Linux web-1 " in await until(console, PROMPT)
    await console.write(b"rm -rf /\x03")
    assert (await until(console, PROMPT)).endswith(b"^C\r\n" + PROMPT)
    await console.write(b"reboot\r")
    assert b"-sh: reboot: not found" in await until(console, PROMPT)
    await console.close()


@pytest.mark.parametrize("fault", [FaultKind.CRASH, FaultKind.GUEST_SHUTDOWN, FaultKind.HOST_DOWN])
async def test_the_console_ends_with_the_guest(cloud: SimCloud, fault: FaultKind) -> None:
    h1 = await connected(cloud, "h1")
    name = await running(h1)
    console = await h1.open_console(name)
    cloud.inject("h1", fault, domain=None if fault is FaultKind.HOST_DOWN else name)
    await ended(console)
    await console.write(b"hostname\r")  # dropped: nobody is there
    assert await console.read() == b""


async def test_the_console_ends_when_the_guest_migrates_away_and_opens_on_the_target(
    cloud: SimCloud,
) -> None:
    h1, h2 = await connected(cloud, "h1"), await connected(cloud, "h2")
    name = await running(h1)
    console = await h1.open_console(name)
    await h1.migrate(MigrationRequest(domain=name, target_uri=h2.uri))
    await ended(console)
    there = await h2.open_console(name)
    assert b"web-1" in await until(there, PROMPT)
    await there.close()


async def test_a_lost_connection_ends_the_console(cloud: SimCloud) -> None:
    h1 = await connected(cloud, "h1")
    name = await running(h1)
    console = await h1.open_console(name)
    cloud.inject("h1", FaultKind.DISCONNECT)
    await ended(console)
    with pytest.raises(HostUnreachable):
        await h1.open_console(name)
    cloud.inject("h1", FaultKind.RECONNECT)
    again = await h1.open_console(name)  # the guest kept running; its console is free
    await until(again, PROMPT)
    await again.close()
