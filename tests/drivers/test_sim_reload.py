"""Every change the simulator makes reaches its state file, through every public entry point.

A hypothesis state machine drives one world with a state file through random driver
calls, ``SimCloud`` methods, faults and the passing of time, and after every step loads
a copy of the file into a second world that must be the same as the first. "The same"
is every attribute of every record in every ``RecordMap`` of the world, not only the
persisted fields, so state kept outside them is caught too; only what the package
docstring ("Restarts") says is not kept is left out: timers, the ports, and completed
migration jobs.

Time is the test's: the loop's clock and the world's clock are one value that only a
rule moves, so a boot, a shutdown or a migration tick fires exactly when the rule lets
time pass, and the second world, loaded outside any loop, finishes nothing on its own.
A rule also kills the process (its loop and timers) and carries on in a new world
loaded from the file, so what a loaded world does is checked the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from virtplane.drivers.backups import BackupRequest, DiskBackup
from virtplane.drivers.base import (
    DiskAttachment,
    DomainSpec,
    ImageRef,
    MigrationPhase,
    MigrationRequest,
    PoolRef,
    domain_name,
)
from virtplane.drivers.errors import DriverError
from virtplane.drivers.sim import FaultKind, SimCloud, SimDriver, SimFaultError
from virtplane.drivers.sim._changes import Record, RecordMap
from virtplane.drivers.sim._host import SimHost
from virtplane.drivers.sim._precopy import Migration

TIMING: dict[str, Any] = {
    "boot_seconds": 1.0,
    "shutdown_seconds": 1.0,
    "migration_tick_s": 1.0,
    "link_mib_s": 100.0,
    "time_scale": 4.0,  # a tick sends 400 MiB: a guest's memory, or less than a GiB of disk
}

HOSTS = ("h1", "h2")
DOMAINS = ("a", "b", "c")
POOLS = {
    "shared": PoolRef(name="shared", path="shared", shared=True, capacity_gib=8),
    "local": PoolRef(name="local", path="local", capacity_gib=4),
    "library": PoolRef(name="library", path="library", shared=True),
}
PLACES = (("shared", "v1"), ("shared", "v3"), ("local", "v2"), ("local", "v3"), ("library", "v1"))
"""(pool, volume) pairs the volume calls pick from: most exist after ``stock``; v3 is no disk's."""
DISKS = {"none": (), "shared": ("sim://shared/v1",), "local": ("sim://local/v2",)}
GIB = 1024**3

TRANSIENT = {"timer", "_ports", "_log", "_entity", "_key", "consoles"}
"""Attributes of a record that no restart keeps: see the package docstring."""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class ManualLoop(asyncio.SelectorEventLoop):
    """An event loop on the test's clock: its timers fire when the test moves the clock."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self._manual_clock = clock

    def time(self) -> float:
        return self._manual_clock.now


def state_of(value: object, *, nested: bool = False) -> object:
    """A comparable copy of a world's value: records by their attributes, hosts inside
    other records by name."""
    if isinstance(value, SimHost) and nested:
        return value.name
    if isinstance(value, Record):
        return {
            name.removeprefix("_persisted_"): state_of(item, nested=True)
            for name, item in vars(value).items()
            if name not in TRANSIENT
        }
    if isinstance(value, RecordMap):
        return {
            key: state_of(item, nested=nested)
            for key, item in value.items()
            if not (isinstance(item, Migration) and item.phase is MigrationPhase.COMPLETED)
        }
    return value


def world_of(cloud: SimCloud) -> dict[str, object]:
    """Every RecordMap of the world, found by walking it, so that a new one is compared too."""
    world: dict[str, object] = {}
    for owner, part in (("cloud", cloud), ("storage", cloud.storage), ("migrations", cloud.migrations)):
        for name, value in vars(part).items():
            if isinstance(value, RecordMap):
                world[f"{owner}.{name}"] = state_of(value)
    return world


def spec(domain: str, cpu: int, disks: str) -> DomainSpec:
    return DomainSpec(
        name=domain_name(domain),
        vm_name=domain,
        vm_uid=domain,
        cpu=cpu,
        memory_mib=256,
        disks=tuple(DiskAttachment(path=p, boot_order=1, size_gib=1) for p in DISKS[disks]),
    )


hosts = st.sampled_from(HOSTS)
homes = st.none() | hosts  # None: the host the domain is on (a call elsewhere is refused)
domains = st.sampled_from(DOMAINS)
pools = st.sampled_from(sorted(POOLS))
places = st.sampled_from(PLACES)
waits = st.sampled_from((0, 1, 4))  # seconds (boot times, migration ticks) to let pass after a call
ids = st.sampled_from(("s1", "s2"))
texts = st.sampled_from(("written", "written again"))


class ReloadedWorld(RuleBasedStateMachine):
    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(dir=directory))
        self.clock = Clock()
        self.loop = ManualLoop(self.clock)
        self.cloud = SimCloud(state_path=self.directory / "sim.db", clock=self.clock, **TIMING)
        self.cloud.add_host("h1", vcpus=4, memory_mib=2048)
        self.cloud.add_host("h2", vcpus=4, memory_mib=2048)

    @initialize()
    def stock(self) -> None:
        """Pools on both hosts, a volume in each kind of pool, an image and three running
        domains, so that the calls find something to act on."""
        for host in HOSTS:
            for pool in POOLS:
                self.ensure_pool(host, pool, POOLS[pool].capacity_gib)
        self.on("h1", lambda d: d.create_volume(POOLS["shared"], "v1", 1))
        self.on("h1", lambda d: d.create_volume(POOLS["local"], "v2", 1))
        self.on("h1", lambda d: d.create_volume(POOLS["shared"], "v3", 1))
        self.put_image_file(None, "written")
        for domain, host, disks in (("a", "h1", "shared"), ("b", "h1", "local"), ("c", "h2", "none")):
            self.define(host, domain, 1, disks)
            self.start(host, domain)
        self.let_time_pass(1.0)

    def home(self, domain: str, host: str | None) -> str:
        """``host``, or when None the host where ``domain`` is live (else defined, else h1)."""
        if host is not None:
            return host
        found = []  # (not live, host) of each host that has it: live ones first
        for name in self.cloud.host_names:
            on_host = self.cloud.host_named(name)
            defined = on_host.domains.get(domain_name(domain)) if on_host is not None else None
            if defined is not None:
                found.append((not defined.active, name))
        return min(found)[1] if found else "h1"

    def teardown(self) -> None:
        self.loop.close()
        self.cloud.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def run(self, step: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """One entry point (or a few) on the loop; the refusals of the simulator are fine."""

        async def guarded() -> None:
            with contextlib.suppress(DriverError, SimFaultError, ValueError):
                await step()

        self.loop.run_until_complete(guarded())

    def on(self, host: str, call: Callable[[SimDriver], Coroutine[Any, Any, object]]) -> None:
        async def step() -> object:
            driver = self.cloud.driver(f"sim://{host}")
            await driver.connect()
            return await call(driver)

        self.run(step)

    # ------------------------------------------------------------------ domains

    @rule(host=hosts, domain=domains, cpu=st.sampled_from((1, 2)), disks=st.sampled_from(sorted(DISKS)))
    def define(self, host: str, domain: str, cpu: int, disks: str) -> None:
        self.on(host, lambda d: d.ensure_defined(spec(domain, cpu, disks)))

    @rule(host=homes, domain=domains, ticks=waits)
    def start(self, host: str | None, domain: str, ticks: int = 0) -> None:
        self.on(self.home(domain, host), lambda d: d.start(domain_name(domain)))
        self.wait(ticks)

    @rule(
        host=homes,
        domain=domains,
        action=st.sampled_from(("shutdown", "destroy", "undefine", "pause", "resume")),
        ticks=waits,
    )
    def power(self, host: str | None, domain: str, action: str, ticks: int) -> None:
        self.on(self.home(domain, host), lambda d: getattr(d, action)(domain_name(domain)))
        self.wait(ticks)

    @rule(host=homes, domain=domains, snapshot=ids)
    def save_memory(self, host: str | None, domain: str, snapshot: str) -> None:
        self.on(self.home(domain, host), lambda d: d.save_memory(domain_name(domain), snapshot))

    @rule(host=homes, domain=domains, snapshot=ids, save_first=st.booleans())
    def restore_memory(self, host: str | None, domain: str, snapshot: str, save_first: bool) -> None:
        where = self.home(domain, host)
        if save_first:
            self.save_memory(where, domain, snapshot)
            self.write_memory(domain, "after the save")
        self.on(where, lambda d: d.destroy(domain_name(domain)))  # a live domain refuses a restore
        handle = f"sim-mem://{domain_name(domain)}@{snapshot}"
        self.on(where, lambda d: d.restore_memory(spec(domain, 1, "none"), handle))

    @rule(
        domain=domains,
        to=st.none() | hosts,
        copy=st.booleans(),
        bandwidth=st.sampled_from((None, 20)),
        ticks=waits,
    )
    def migrate(self, domain: str, to: str | None, copy: bool, bandwidth: int | None, ticks: int) -> None:
        source = self.home(domain, None)
        request = MigrationRequest(
            domain=domain_name(domain),
            target_uri=f"sim://{to or next(h for h in HOSTS if h != source)}",
            copy_disks=DISKS["local"] if copy else (),
            bandwidth_mib_s=bandwidth,
            spec=spec(domain, 1, "local"),
        )
        self.on(source, lambda d: d.migrate(request))
        self.wait(ticks)

    @rule(host=homes, domain=domains)
    def abort_migration(self, host: str | None, domain: str) -> None:
        self.on(self.home(domain, host), lambda d: d.abort_migration(domain_name(domain)))

    # ------------------------------------------------------------------ storage

    @rule(host=hosts, pool=pools, capacity=st.sampled_from((0, 4, 8)))
    def ensure_pool(self, host: str, pool: str, capacity: int) -> None:
        ref = POOLS[pool]
        self.on(host, lambda d: d.ensure_pool(PoolRef(ref.name, ref.path, ref.shared, capacity)))

    @rule(host=hosts, place=places, size=st.sampled_from((1, 2)), from_image=st.booleans())
    def create_volume(self, host: str, place: tuple[str, str], size: int, from_image: bool) -> None:
        source = ImageRef(POOLS["library"], "disk.img") if from_image else None
        self.on(host, lambda d: d.create_volume(POOLS[place[0]], place[1], size, source))

    @rule(host=hosts, place=places, size=st.sampled_from((1, 2, 3)))
    def resize_volume(self, host: str, place: tuple[str, str], size: int) -> None:
        self.on(host, lambda d: d.resize_volume(POOLS[place[0]], place[1], size))

    @rule(host=hosts, place=places)
    def delete_volume(self, host: str, place: tuple[str, str]) -> None:
        self.on(host, lambda d: d.delete_volume(POOLS[place[0]], place[1]))

    @rule(host=hosts, place=places, snapshot=ids)
    def snapshot_volume(self, host: str, place: tuple[str, str], snapshot: str) -> None:
        self.on(host, lambda d: d.snapshot_volume(POOLS[place[0]], place[1], snapshot))

    @rule(host=hosts, place=places, snapshot=ids, content=texts)
    def revert_volume(self, host: str, place: tuple[str, str], snapshot: str, content: str) -> None:
        pool, volume = place
        self.on(host, lambda d: d.snapshot_volume(POOLS[pool], volume, snapshot))
        self.write_volume(f"sim://{pool}/{volume}", host, content)  # what the revert undoes
        self.on(
            host, lambda d: d.revert_volume(POOLS[pool], volume, f"sim-snap://{pool}/{volume}@{snapshot}")
        )

    # ------------------------------------------------------------------ backups

    @rule(
        host=homes,
        domain=domains,
        disks=st.sampled_from(sorted(DISKS)),
        checkpoint=ids,
        since=st.none() | ids,
    )
    def begin_backup(
        self, host: str | None, domain: str, disks: str, checkpoint: str, since: str | None
    ) -> None:
        request = BackupRequest(
            domain=domain_name(domain),
            target=POOLS["shared"],
            checkpoint=f"{domain}-{checkpoint}",
            disks=tuple(
                DiskBackup(
                    path, f"bk-{domain}-{checkpoint}", GIB, None if since is None else f"bk-{domain}-{since}"
                )
                for path in DISKS[disks]
            ),
            incremental_from=None if since is None else f"{domain}-{since}",
        )
        self.on(self.home(domain, host), lambda d: d.begin_backup(request))

    @rule(host=homes, domain=domains, action=st.sampled_from(("backup_job", "abort_backup")))
    def follow_backup(self, host: str | None, domain: str, action: str) -> None:
        self.on(self.home(domain, host), lambda d: getattr(d, action)(domain_name(domain)))

    @rule(host=homes, domain=domains, checkpoint=ids)
    def delete_checkpoint(self, host: str | None, domain: str, checkpoint: str) -> None:
        self.on(
            self.home(domain, host),
            lambda d: d.delete_checkpoint(domain_name(domain), f"{domain}-{checkpoint}"),
        )

    @rule(domain=domains, to=hosts)
    def redefine_checkpoints(self, domain: str, to: str) -> None:
        definitions: list[tuple[str, ...]] = []

        async def read(d: SimDriver) -> None:
            definitions.append(await d.checkpoint_definitions(domain_name(domain)))

        self.on(self.home(domain, None), read)
        if definitions:
            self.on(to, lambda d: d.redefine_checkpoints(domain_name(domain), definitions[0]))

    @rule(host=hosts, handle=st.sampled_from(("sim-snap://shared/v3@s1", "sim-mem://virtplane-a@s1")))
    def delete_snapshot(self, host: str, handle: str) -> None:
        self.on(host, lambda d: d.delete_volume_snapshot(handle))

    # ------------------------------------------------------------------ the cloud's own methods

    @rule(
        host=homes, kind=st.sampled_from(list(FaultKind)), domain=st.none() | domains, count=st.integers(1, 2)
    )
    def inject(self, host: str | None, kind: FaultKind, domain: str | None, count: int) -> None:
        name = None if domain is None else domain_name(domain)
        where = self.home(domain, host) if domain is not None else host or "h1"

        async def step() -> None:
            self.cloud.inject(where, kind, name, count)

        self.run(step)

    @rule(domain=domains, rate=st.sampled_from((0.0, 30.0, 200.0)))
    def set_dirty_rate(self, domain: str, rate: float) -> None:
        async def step() -> None:
            self.cloud.set_dirty_rate(domain_name(domain), rate)

        self.run(step)

    @rule(
        volume=st.sampled_from(("sim://shared/v1", "sim://shared/v3", "sim://local/v2")),
        host=homes,
        text=texts,
    )
    def write_volume(self, volume: str, host: str | None, text: str) -> None:
        async def step() -> None:
            self.cloud.write_volume(volume, text, host=host)

        self.run(step)

    @rule(host=st.none() | hosts, text=texts)
    def put_image_file(self, host: str | None, text: str) -> None:
        async def step() -> None:
            self.cloud.put_image_file("library", "disk.img", text, host=host)

        self.run(step)

    @rule(domain=domains, text=texts)
    def write_memory(self, domain: str, text: str) -> None:
        async def step() -> None:
            self.cloud.write_memory(domain_name(domain), text)

        self.run(step)

    @rule(name=st.sampled_from(("h1", "h3")))
    def add_host(self, name: str) -> None:
        async def step() -> None:
            self.cloud.add_host(name, vcpus=2, memory_mib=1024)

        self.run(step)

    @rule(seconds=st.sampled_from((0.5, 1.0, 3.0)))
    def let_time_pass(self, seconds: float) -> None:
        """Boots, shutdowns and migration ticks that are due by then fire, each as its own entry
        point; after a restart, ``resume`` lets the loaded ones go on."""
        self.clock.now += seconds
        self.loop.run_until_complete(self.cloud.resume())

    @rule()
    def restart(self) -> None:
        """The process dies (its loop and timers with it) and a new one loads the file."""
        self.loop.close()
        assert self.cloud.journal is not None
        self.cloud.journal.close()  # nothing is pending: each entry point committed
        self.loop = ManualLoop(self.clock)
        self.cloud = SimCloud(state_path=self.directory / "sim.db", clock=self.clock, **TIMING)

    def wait(self, ticks: int) -> None:
        """Let a few boot times or migration ticks pass, one by one."""
        for _ in range(ticks):
            self.let_time_pass(1.0)

    # ------------------------------------------------------------------ the check

    @invariant()
    def a_reload_sees_the_same_world(self) -> None:
        copy = self.directory / "copy.db"
        source, target = sqlite3.connect(self.directory / "sim.db"), sqlite3.connect(copy)
        with source, target:
            source.backup(target)
        source.close()
        target.close()
        reloaded = SimCloud(state_path=copy, clock=self.clock, **TIMING)
        try:
            assert world_of(reloaded) == world_of(self.cloud)
        finally:
            reloaded.close()
            copy.unlink()


def test_a_reload_sees_the_world_as_every_entry_point_left_it(tmp_path: Path) -> None:
    run_state_machine_as_test(
        lambda: ReloadedWorld(tmp_path),
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
