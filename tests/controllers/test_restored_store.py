"""A control plane restored from yesterday's backup onto a fresh machine, over the same hosts.

Since the backup, VMs were created, deleted, migrated and stopped while the hypervisors (the
simulated hosts, whose state file outlives the control plane as real hosts do) ran on. The
restored control plane must adopt what the hosts report, never start a second copy of a VM,
report what differs as events, and lose no VM that exists (docs/decisions.md, "Restoring the
control plane from a backup").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from tests.conftest import eventually, make_plane
from tests.controllers.helpers import add_host, add_vm, event_reasons, operate, vm, wait_op, wait_settled
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    Host,
    Metadata,
    MigrateSpec,
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VMPhase,
)
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimCloud
from virtplane.store.backup import sqlite_backup
from virtplane.store.errors import Conflict
from virtplane.store.store import Store, sqlite_url

BOOT_S = 0.02
YESTERDAY = ("moved", "stopped", "deleted", "steady", "unplaced")


def _hosts(state: Path) -> SimCloud:
    return SimCloud(boot_seconds=BOOT_S, shutdown_seconds=BOOT_S, state_path=state)


@contextmanager
def _store(path: Path) -> Iterator[Store]:
    store = Store(sqlite_url(path))
    store.migrate()
    try:
        yield store
    finally:
        store.close()


@asynccontextmanager
async def _running(store: Store, sim: SimCloud) -> AsyncIterator[ControlPlane]:
    plane = make_plane(store, sim=sim)
    await plane.start()
    try:
        yield plane
    finally:
        await plane.stop()


class SecondCopies:
    """Looks at every host at every turn of the loop and keeps each domain it ever saw live on
    two hosts at once: the record of the whole run, not a sample taken at its end."""

    def __init__(self, sim: SimCloud) -> None:
        self.sim = sim
        self.seen: set[tuple[str, tuple[str, ...]]] = set()
        self.looks = 0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            domains = {
                d for h in self.sim.host_names if (host := self.sim.host_named(h)) for d in host.domains
            }
            for domain in domains:
                hosts = self.sim.active_hosts(domain)
                if len(hosts) > 1:
                    self.seen.add((domain, tuple(hosts)))
            self.looks += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> SecondCopies:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        assert not self._task.done(), self._task  # it kept looking to the end (it did not fail)
        self._task.cancel()


def _domain(plane: ControlPlane, name: str) -> str:
    return domain_name(vm(plane, name).metadata.uid)


def _migrate(plane: ControlPlane, name: str, target: str) -> str:
    op = f"{name}-to-{target}"
    spec = VirtualMachineOperationSpec(
        vm=name, type=OperationType.MIGRATE, migrate=MigrateSpec(target_host=target)
    )
    plane.store.create(VirtualMachineOperation(metadata=Metadata(name=op), spec=spec))
    return op


def _host_events(plane: ControlPlane, host: str) -> list[str]:
    return [
        e.message
        for e in plane.store.list_events(kind="Host", name=host, limit=100)
        if e.reason == "UnknownDomain"
    ]


async def test_a_restored_control_plane_adopts_what_the_hosts_run(tmp_path: Path) -> None:
    """The restored control plane:
    - finds "moved" (the store places it on its old host) on the host it migrated to, says so
      (FoundOnOtherHost), and never starts it on the old one (a second copy);
    - leaves "created" (unknown to the store) running and reports it (UnknownDomain);
    - leaves "steady" running where it is, not started again;
    - finds "unplaced" (on no host in the store: a backup taken before its first placement)
      where it runs, and does not place it again;
    - brings back "deleted" and "stopped" as the restored store asks (its record of their delete and
      stop is lost with the day): "deleted" has no domain anywhere (DomainMissing) and starts again;
      "stopped", off where it was, is started again by its run policy."""
    for part in ("old", "new"):
        (tmp_path / part).mkdir()
    state = tmp_path / "sim.db"  # the hypervisors: they outlive the control plane's machine
    backup = tmp_path / "yesterday.db"
    sim = _hosts(state)
    with _store(tmp_path / "old" / "virtplane.db") as store:
        async with _running(store, sim) as plane:
            for host in ("host-1", "host-2"):
                add_host(plane, host)
            for name in YESTERDAY:
                add_vm(plane, name, RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY)
            for name in YESTERDAY:
                await wait_settled(plane, name, "Running")
            then = {name: (vm(plane, name).status.host, _domain(plane, name)) for name in YESTERDAY}
            sqlite_backup(tmp_path / "old" / "virtplane.db", backup)
            started_then = {name: event_reasons(plane, name).count("Started") for name in YESTERDAY}

            # the day after the backup
            add_vm(plane, "created", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY)
            await wait_settled(plane, "created", "Running")
            created = (vm(plane, "created").status.host, _domain(plane, "created"))
            away = "host-2" if then["moved"][0] == "host-1" else "host-1"
            migrated = await wait_op(plane, _migrate(plane, "moved", away))
            assert migrated.status.phase is OperationPhase.COMPLETED, migrated.status
            stopped = await wait_op(plane, operate(plane, "stopped", OperationType.STOP))
            assert stopped.status.phase is OperationPhase.COMPLETED, stopped.status
            plane.store.delete(VirtualMachine, "deleted")
            await eventually(lambda: plane.store.find(VirtualMachine, "deleted") is None)
    sim.close()  # the control plane's machine is gone; the hosts keep their state

    (tmp_path / "new" / "virtplane.db").write_bytes(backup.read_bytes())  # the restore
    hosts = _hosts(state)
    assert hosts.active_hosts(then["moved"][1]) == [away]
    assert hosts.active_hosts(then["deleted"][1]) == []
    with _store(tmp_path / "new" / "virtplane.db") as store:
        # "unplaced": what a backup taken between its creation and its placement holds (no host
        # yet), with the host it runs on disabled since, so that placement would pick another
        unplaced = store.get(VirtualMachine, "unplaced")
        unplaced.status.host, unplaced.status.phase = None, VMPhase.PENDING
        store.update_status(unplaced)
        runs_on = store.get(Host, then["unplaced"][0])
        runs_on.spec.enabled = False
        store.update(runs_on)
        async with SecondCopies(hosts) as copies, _running(store, hosts) as plane:

            def moved_adopted() -> bool:
                assert copies.seen == set(), f"a second copy started: {copies.seen}"
                moved = vm(plane, "moved")
                return moved.status.host == away and moved.status.phase.value == "Running"

            await eventually(moved_adopted)
            assert "FoundOnOtherHost" in event_reasons(plane, "moved")
            await eventually(lambda: _host_events(plane, created[0]))
            assert created[1] in _host_events(plane, created[0])[0]
            for name in ("deleted", "stopped", "steady", "unplaced"):
                await wait_settled(plane, name, "Running")
            assert vm(plane, "unplaced").status.host == then["unplaced"][0]
            assert "FoundOnOtherHost" in event_reasons(plane, "unplaced")
            assert "DomainMissing" in event_reasons(plane, "deleted")
            assert vm(plane, "steady").status.host == then["steady"][0]
            assert event_reasons(plane, "steady").count("Started") == started_then["steady"]
            assert event_reasons(plane, "moved").count("Started") == started_then["moved"]
            looks = copies.looks
            await eventually(lambda: copies.looks > looks + 100)  # the hosts were looked at throughout
        assert copies.seen == set()
        # every VM that exists runs exactly once; the one the store never knew is untouched
        for name in YESTERDAY:
            assert len(hosts.active_hosts(_domain(plane, name))) == 1, name
        assert hosts.active_hosts(created[1]) == [created[0]]
    hosts.close()


async def test_nothing_is_defined_while_a_host_that_may_run_the_vm_cannot_be_asked(
    plane: ControlPlane,
) -> None:
    """The store says host A; the domain runs on host B, which cannot be asked (its connection
    is lost, its guests run on): the VM waits, and its domain is defined nowhere, until B
    answers and it is found there."""
    for host in ("host-1", "host-2"):
        add_host(plane, host)
    add_vm(plane, "v", RunPolicy.ALWAYS_ON)
    running_on = (await wait_settled(plane, "v", "Running")).status.host
    assert running_on is not None
    recorded = "host-2" if running_on == "host-1" else "host-1"
    domain = _domain(plane, "v")
    plane.sim.inject(running_on, "disconnect")
    while True:  # what a store restored from before a migration says
        current = vm(plane, "v")
        current.status.host = recorded
        try:
            plane.store.update_status(current)
            break
        except Conflict:
            continue
    await reconciled(plane, "v")
    waiting = vm(plane, "v")
    assert f"cannot ask {running_on}" in waiting.status.message, waiting.status
    assert domain not in plane.sim.host_named(recorded).domains  # type: ignore[union-attr]
    plane.sim.inject(running_on, "reconnect")
    await eventually(lambda: vm(plane, "v").status.host == running_on)
    assert "FoundOnOtherHost" in event_reasons(plane, "v")
    assert plane.sim.active_hosts(domain) == [running_on]
    assert domain not in plane.sim.host_named(recorded).domains  # type: ignore[union-attr]
