"""The second-copy case of a restored store on libvirt's own test driver (``test:///``).

Two independent test-driver hosts; a VM runs on one, and the store is then made to say what
a backup from before a migration says: the VM is on the other host. The control plane must
find it where it runs (FoundOnOtherHost) and never define or start it on the recorded host.
The simulated hosts' version of this is ``test_restored_store.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import eventually, libvirt_or_skip, make_plane
from tests.controllers.helpers import add_host, add_vm, event_reasons, vm, wait_settled
from tests.drivers.conftest import write_node_xml
from virtplane.domain.phases import LIVE_STATES
from virtplane.domain.resources import RunPolicy, VirtualMachine
from virtplane.drivers.base import domain_name
from virtplane.store.errors import Conflict
from virtplane.store.store import Store


async def test_a_vm_the_store_places_on_the_wrong_host_is_found_not_started_again(
    store: Store, tmp_path: Path
) -> None:
    libvirt_or_skip()
    plane = make_plane(store)
    await plane.start()
    try:
        uris = {name: write_node_xml(tmp_path / f"{name}.xml") for name in ("kvm-a", "kvm-b")}
        for name, uri in uris.items():
            add_host(plane, name, uri=uri)
        add_vm(plane, "moved", RunPolicy.ALWAYS_ON, memory_mib=512)
        running = await wait_settled(plane, "moved", "Running")
        where = running.status.host
        assert where is not None
        recorded = next(name for name in uris if name != where)
        domain = domain_name(running.metadata.uid)
        drivers = {name: await plane.hosts.get(uri) for name, uri in uris.items()}
        live_on: set[tuple[str, ...]] = set()  # every set of hosts the domain was seen live on

        async def watch() -> None:
            while True:
                infos = {name: await driver.get_info(domain) for name, driver in drivers.items()}
                live_on.add(
                    tuple(sorted(n for n, i in infos.items() if i is not None and i.state in LIVE_STATES))
                )
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        # what a backup from before a migration says: the VM runs on the other host
        while True:
            current = vm(plane, "moved")
            current.status.host = recorded
            try:
                store.update_status(current)
                break
            except Conflict:
                continue

        def adopted() -> bool:
            assert (where, recorded) not in {tuple(sorted(x)) for x in live_on if len(x) > 1}, live_on
            moved = plane.store.get(VirtualMachine, "moved")
            return moved.status.host == where and "FoundOnOtherHost" in event_reasons(plane, "moved")

        await eventually(adopted)
        await wait_settled(plane, "moved", "Running")
        assert await drivers[recorded].get_info(domain) is None  # never even defined there
        assert not watcher.done()
        watcher.cancel()
        assert all(len(hosts) <= 1 for hosts in live_on), live_on
    finally:
        await plane.stop()
