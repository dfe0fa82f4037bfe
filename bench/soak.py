"""Row 9: months of a fleet's writes in compressed time, and the database's size over them.

The store runs on a clock the soak moves (``Store.clock``: the events' times and what retention
counts ages from), so a simulated day takes a second or so: each simulated hour VMs are
created (with their event), status-written (each with an event) and deleted once two days old
(with their event), so the fleet itself stops growing after two days; then retention runs as the
server's would (``runtime.retention.prune`` with the settings' defaults: changes an hour, events
a day). The same writes run twice: with retention, and without (every release before it). The
figure is the size with retention at the end over its size on day 3, when the VMs stopped
growing and the oldest events have passed their day: flat is 1.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.rows import Row, at_most
from bench.seed import running_vm
from bench.sizes import Sizes
from virtplane.domain.resources import EventType, VirtualMachine, VMPhase
from virtplane.domain.settings import REGISTRY
from virtplane.runtime.retention import Limits, prune
from virtplane.store.store import Store, sqlite_url

TICK_S = 3600.0  # an hour: the server prunes every minute, the soak after each tick's writes
TICKS_PER_DAY = round(86400 / TICK_S)
LIFETIME_TICKS = 2 * TICKS_PER_DAY  # a VM is deleted two days after it was created
FLAT_FROM_DAY = 3
DEFAULTS = Limits(
    REGISTRY["store.changes.retention_s"].default,
    REGISTRY["store.changes.max_rows"].default,
    REGISTRY["events.retention_s"].default,
    REGISTRY["events.max_rows"].default,
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def file_mib(store: Store, path: Path) -> float:
    """The database file's size once its WAL is written back (what the disk holds for it)."""
    with store.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").all()
    return round(path.stat().st_size / 2**20, 2)


def soak(path: Path, days: int, creates_per_tick: int, status_per_tick: int, retention: bool) -> list[float]:
    """The soak on a new database at ``path``; the file's size in MiB at the end of each day."""
    clock = Clock()
    store = Store(sqlite_url(path), clock=clock)
    store.migrate()
    normal = EventType.NORMAL
    living: list[VirtualMachine] = []
    sizes: list[float] = []
    try:
        for tick in range(days * TICKS_PER_DAY):
            for i in range(creates_per_tick):
                name = f"vm-{tick}-{i}"
                vm = running_vm(name, "h1")
                vm.metadata.finalizers = []
                living.append(store.create(vm, events=[("VirtualMachine", name, "Created", "", normal)]))
            for i in range(min(status_per_tick, len(living))):
                vm = living[(tick * status_per_tick + i) % len(living)]
                vm.status.phase = VMPhase.STOPPED if vm.status.phase is VMPhase.RUNNING else VMPhase.RUNNING
                message = f"VM {vm.metadata.name} is {vm.status.phase.value} on h1 (run policy AlwaysOn)"
                event = ("VirtualMachine", vm.metadata.name, vm.status.phase.value, message, normal)
                vm = store.update_status(vm, events=[event])
                living[(tick * status_per_tick + i) % len(living)] = vm
            if tick >= LIFETIME_TICKS:
                for vm in living[:creates_per_tick]:
                    store.delete(VirtualMachine, vm.metadata.name)
                    store.record_event("VirtualMachine", vm.metadata.name, "Deleted")
                del living[:creates_per_tick]
            clock.now += timedelta(seconds=TICK_S)
            if retention:
                prune(store, DEFAULTS)
            if (tick + 1) % TICKS_PER_DAY == 0:
                sizes.append(file_mib(store, path))
    finally:
        store.close()
    return sizes


async def run(work: Path, sizes: Sizes, _tx_per_s: float, _profile_dir: Path | None) -> list[Row]:
    days, creates, status = sizes.soak_days, sizes.soak_creates_per_tick, sizes.soak_status_per_tick
    started = time.monotonic()
    kept = await asyncio.to_thread(soak, work / "soak-retention.db", days, creates, status, True)
    with_s = time.monotonic() - started
    grown = await asyncio.to_thread(soak, work / "soak-without.db", days, creates, status, False)
    flat = kept[-1] / kept[FLAT_FROM_DAY - 1]
    writes_per_day = TICKS_PER_DAY * (2 * creates + status)  # creates, status writes, deletes
    return [
        Row(
            9,
            f"Soak: {days} simulated days of {writes_per_day:,} writes and as many events a day; database size",
            round(flat, 3),
            f"x its size on day {FLAT_FROM_DAY}, with retention",
            "<= 1.1 (flat)",
            at_most(flat, 1.1),
            details={
                "days": days,
                "writes_per_day": writes_per_day,
                "with_retention_mib": kept,
                "without_retention_mib": grown,
                "seconds_with_retention": round(with_s, 1),
                "limits": vars(DEFAULTS),
            },
            note=(
                f"the file after {days} days: {kept[-1]:g} MiB with retention (day {FLAT_FROM_DAY}: "
                f"{kept[FLAT_FROM_DAY - 1]:g}), {grown[-1]:g} MiB without (day {FLAT_FROM_DAY}: "
                f"{grown[FLAT_FROM_DAY - 1]:g}); the settings' defaults, pruned every simulated hour"
            ),
        )
    ]
