"""Fixtures for driver tests: libvirt test-driver hosts (no daemon) and polling helpers.

Each ``node_uri`` is a ``test:///PATH`` URI for its own node XML file: every
open of such a URI gets an independent in-memory host, so two of them behave
like two separate hypervisors.
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.conftest import libvirt_or_skip

T = TypeVar("T")


def write_node_xml(path: Path, *, cpus: int = 8, memory_mib: int = 16384) -> str:
    """A libvirt test-driver node description; returns its ``test:///`` URI."""
    node = ET.Element("node")
    cpu = ET.SubElement(node, "cpu")
    for tag, value in (("nodes", 1), ("sockets", 1), ("cores", cpus), ("threads", 1), ("active", cpus)):
        ET.SubElement(cpu, tag).text = str(value)
    ET.SubElement(cpu, "mhz").text = "2000"
    ET.SubElement(cpu, "model").text = "i686"
    ET.SubElement(node, "memory").text = str(memory_mib * 1024)
    path.write_text(ET.tostring(node, encoding="unicode"))
    return f"test://{path}"


@pytest.fixture
def node_uri(tmp_path: Path) -> Callable[[str], str]:
    """Make an independent test-driver host: ``node_uri("a")`` -> ``test:///tmp/.../a.xml``."""

    def make(name: str) -> str:
        return write_node_xml(tmp_path / f"{name}.xml")

    return make


@pytest.fixture
async def libvirt_driver(node_uri: Callable[[str], str]) -> AsyncIterator[object]:
    """A connected LibvirtDriver on a fresh test-driver host."""
    libvirt_or_skip()
    from virtplane.drivers.libvirt import LibvirtDriver

    driver = LibvirtDriver(node_uri("host"))
    await driver.connect()
    yield driver
    await driver.close()


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], limit_s: float = 10.0
) -> T:
    """Poll ``probe`` until ``accept`` holds for its result; the limit only guards against a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"still not accepted after {limit_s} s: {value!r}")
        await asyncio.sleep(0.005)


async def wait_for(condition: Callable[[], bool], limit_s: float = 10.0) -> None:
    """Let other threads and the loop run until ``condition()``; fail rather than hang."""

    async def probe() -> bool:
        return condition()

    await eventually(probe, bool, limit_s)
