"""Rows 17 and 18: what usage collection costs, and how fast the usage API answers.

Row 17 runs in this process, on the simulator's drivers: ``sizes.fleet_hosts`` hosts with
``sizes.fleet_vms`` running domains (each with a disk and a NIC, each with a load), and a
``UsageHistory`` fed one round per 10 s interval, each round one ``usage`` call per host
then the rates and rings, as the leader's ``UsageCollector.collect_once`` does (its cache
lookup of a uid is a dict's here). The figure is the CPU time of a round over the interval,
as a share of one core: what collection adds beside row 7's idle figure. With it, the memory
the history holds once full (an hour and a day of every VM and host), and what generating the
usage part of /metrics takes (the fastest of three).

Row 18 asks ``GET /v1/vms/NAME/usage?since=1h`` of the real app (ASGI, in process, a store
on SQLite) for one VM whose hour is full (360 rounds), one request at a time.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path

import httpx

from bench.rows import Row, at_most, summary_ms
from bench.sizes import Sizes
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import Accelerator, VirtualMachine
from virtplane.drivers.base import DiskAttachment, DomainSpec, NicAttachment, domain_name
from virtplane.drivers.sim import SimCloud, SimLoad
from virtplane.drivers.sim._driver import SimDriver
from virtplane.drivers.stats import DiskCounters, DomainUsage, HostUsage, UsageSample
from virtplane.runtime.usage import INTERVAL_S, UsageHistory
from virtplane.store.store import Store, sqlite_url
from virtplane.usage_metrics import UsageMetrics

ROWS = frozenset({17, 18})
ROUNDS = 30  # row 17: measured rounds, after one to warm up (every series exists)


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def _fleet(sizes: Sizes, clock: _Clock) -> tuple[list[tuple[str, SimDriver]], dict[str, str]]:
    cloud = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0, clock=clock)
    rng = random.Random(35)
    drivers: list[tuple[str, SimDriver]] = []
    names: dict[str, str] = {}
    per_host = sizes.fleet_vms // sizes.fleet_hosts
    for h in range(sizes.fleet_hosts):
        host = f"host-{h:03d}"
        cloud.add_host(host, vcpus=64, memory_mib=512 * 1024)
        driver = cloud.driver(f"sim://{host}")
        await driver.connect()
        driver.use_accelerator(Accelerator.TCG)  # the simulator defines domains under one
        for v in range(per_host):
            uid = uuid.uuid4().hex
            spec = DomainSpec(
                name=domain_name(uid),
                vm_name=f"vm-{h:03d}-{v:02d}",
                vm_uid=uid,
                cpu=2,
                memory_mib=2048,
                disks=(DiskAttachment(f"/pool/{uid}.qcow2"),),
                nics=(NicAttachment(f"52:54:00:{h % 256:02x}:{v // 256:02x}:{v % 256:02x}", None),),
            )
            await _run(driver, spec)
            cloud.set_load(spec.name, SimLoad(cpu=rng.random(), disk_write_bps=rng.random() * 1e6))
            names[uid] = spec.vm_name
        drivers.append((host, driver))
    return drivers, names


async def _run(driver: SimDriver, spec: DomainSpec) -> None:
    await driver.ensure_defined(spec)
    await driver.start(spec.name)


async def _round(history: UsageHistory, drivers: list[tuple[str, SimDriver]], names: dict[str, str]) -> None:
    answers = await asyncio.gather(*(driver.usage() for _, driver in drivers))
    history.record(time.time(), {host: a for (host, _), a in zip(drivers, answers, strict=True)}, names.get)


async def collection(sizes: Sizes) -> Row:
    clock = _Clock()
    drivers, names = await _fleet(sizes, clock)
    history = UsageHistory()
    await _round(history, drivers, names)
    cpu: list[float] = []
    for _ in range(ROUNDS):
        clock.now += INTERVAL_S
        started = time.process_time()
        await _round(history, drivers, names)
        cpu.append(time.process_time() - started)
    per_round = sum(cpu) / len(cpu)
    metrics = UsageMetrics(history)
    scrapes = []
    for _ in range(3):
        started = time.perf_counter()
        exposition = metrics.text()
        scrapes.append(time.perf_counter() - started)
    percent = 100 * per_round / INTERVAL_S
    # the rings are allocated whole on a series' first write: this is what a full day holds
    history_mib = history.nbytes / 2**20
    return Row(
        17,
        f"Usage collection: {sizes.fleet_vms:,} VMs on {sizes.fleet_hosts} hosts, one round per {INTERVAL_S:g} s",
        round(percent, 2),
        "% of one core",
        "<= 5 % of one core (beside row 7)",
        at_most(percent, 5),
        details={
            "round_ms_mean": round(1000 * per_round, 1),
            "round_ms_max": round(1000 * max(cpu), 1),
            "rounds": ROUNDS,
            "history_mib": round(history_mib, 1),
            "history_kib_per_vm": round(history.nbytes / 1024 / max(1, len(names)), 1),
            "metrics_scrape_ms": round(1000 * min(scrapes), 1),  # /metrics' usage part, generated
            "metrics_scrape_kib": round(len(exposition) / 1024),
        },
        note="in process, the simulator's drivers; the history's rings (an hour at 10 s and a day "
        f"in 5-min means, float32) hold {history_mib:.0f} MiB",
    )


async def api_hour(work: Path, sizes: Sizes) -> Row:
    store = Store(sqlite_url(work / "usage-api.db"))
    store.migrate()
    plane = ControlPlane(store, sim=SimCloud())
    vm = store.create(VirtualMachine.model_validate({"metadata": {"name": "web-1"}}))
    history = plane.usage
    history.collecting = True
    host = HostUsage(8, 0, 0, 8192.0, 1024.0, 0.5)
    start = time.time() - INTERVAL_S * history.resolution.hour_slots
    for tick in range(history.resolution.hour_slots):
        usage = DomainUsage(
            vm.metadata.uid,
            2,
            tick * 10**9,
            2048,
            512.0,
            disks=(DiskCounters("vda", tick * 4096, tick * 8192, tick, tick),),
        )
        history.record(
            start + tick * INTERVAL_S, {"host-1": UsageSample(host, (usage,))}, {vm.metadata.uid: "web-1"}.get
        )
    token = store.create_token("bench", "viewer")
    samples: list[float] = []
    transport = httpx.ASGITransport(app=plane.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        headers = {"Authorization": f"Bearer {token}"}
        for _ in range(sizes.pages * 5):
            started = time.perf_counter()
            response = await client.get("/v1/vms/web-1/usage", params={"since": "1h"}, headers=headers)
            response.raise_for_status()
            samples.append(time.perf_counter() - started)
        points = len(response.json()["t"])
    store.close()
    stats = summary_ms(samples)
    median = stats["median_ms"]
    return Row(
        18,
        "Usage API: an hour of one VM (GET /v1/vms/NAME/usage?since=1h)",
        median,
        "ms (median)",
        "< 20 ms",
        at_most(median, 20),
        details={**stats, "points": points},
        note=f"the real app in process (ASGI, SQLite store); {points} points of 10 metrics",
    )


async def run(work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None) -> list[Row]:
    wanted = ROWS if sizes.selected is None else sizes.selected & ROWS
    rows = []
    if 17 in wanted:
        rows.append(await collection(sizes))
    if 18 in wanted:
        rows.append(await api_hour(work, sizes))
    return rows
