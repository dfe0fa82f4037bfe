"""Rows 2, 5, 7, 8 and 19 on one big fleet: cold start after a power outage, crash to Running,
idle cost, the first page of the VM list, and the dashboard's first screen of it
(``bench.dashboard``).

The fleet (``seed.fleet``) is written into the store before the server starts, with every
VM Running on its host and the simulator's state empty: all domains are gone. The server
then starts and brings them back (row 2); on the running fleet, single VMs are crashed
(row 5), the server is left alone (row 7) and the first page of VMs is listed (row 8).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from bench import dashboard, observe
from bench.rows import Row, at_least, at_most, summary_ms
from bench.seed import fleet, seed
from bench.server import BenchServer
from bench.sizes import Sizes

POLL_S = 0.001


async def run(
    work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None, db_url: str | None = None
) -> list[Row]:
    data = work / ("fleet-pg" if db_url else "fleet")
    seeded_at = time.monotonic()
    seed(data, fleet(sizes.fleet_hosts, sizes.fleet_vms), db_url)
    seed_s = time.monotonic() - seeded_at
    server = BenchServer(data, profile_dir=profile_dir, db_url=db_url)
    server.start()
    try:
        wanted = sizes.selected if sizes.selected is not None else frozenset({2, 5, 7, 8, 19})
        rows = [cold_start(server, sizes, ceiling, seed_s)]  # the others need the fleet running
        if 5 in wanted:
            rows.append(await crashes(server, sizes))
        if 7 in wanted:
            rows.append(idle(server, sizes))
        if 8 in wanted:
            rows.append(await first_page(server, sizes))
        if 19 in wanted:
            rows.append(await dashboard.first_screen(server, sizes))
        return rows
    finally:
        server.stop()


def cold_start(server: BenchServer, sizes: Sizes, ceiling: float, seed_s: float) -> Row:
    n = sizes.fleet_vms
    with server.profile("row2-cold-start"):
        seen_at = observe.wait_ready_since(server.db_path, server.launched_at, n)
    cpu_s = server.cpu_seconds()  # since launch: start-up and cold start, all of it
    times = [t for t in observe.ready_times(server.db_path).values() if t > server.launched_at]
    last = max(times) if len(times) == n else seen_at
    makespan = last - server.launched_at
    rate = n / makespan
    return Row(
        2,
        f"Cold start: {n:,} AlwaysOn VMs on {sizes.fleet_hosts} hosts, all domains gone, until all Running",
        round(rate),
        "VMs to Running per s",
        ">= 1,000 per s",
        at_least(rate, 1000),
        ratio=round(rate / ceiling, 3),
        details={
            "vms": n,
            "hosts": sizes.fleet_hosts,
            "restarted": len(times),
            "makespan_s": round(makespan, 2),
            "startup_s": round(server.ready_at - server.launched_at, 2),
            "rate_after_startup_per_s": round(n / max(1e-9, last - server.ready_at)),
            "first_running_after_s": round(min(times) - server.launched_at, 2) if times else None,
            "seed_s": round(seed_s, 1),
            "server_cpu_s": round(cpu_s, 1),
            "server_cpu_ms_per_vm": round(1000 * cpu_s / n, 2),
        },
        note="from the server's launch (process start, cache load) to the last VM's Ready=True",
    )


async def crashes(server: BenchServer, sizes: Sizes) -> Row:
    """Crash one VM at a time (the simulator's crash fault) and wait until it is Running again."""
    rng = random.Random(13)
    names = [f"vm-{i:05d}" for i in rng.sample(range(sizes.fleet_vms), sizes.crashes)]
    db = observe.connect(server.db_path)
    latencies: list[float] = []
    cpu: list[float] = []
    try:
        async with server.client() as client:
            server.wait_quiet()
            with server.profile("row5-crash"):
                for name in names:
                    used = server.cpu_seconds()
                    sent = time.time()
                    response = await client.post(f"/v1/vms/{name}/faults", json={"kind": "crash"})
                    response.raise_for_status()
                    latencies.append(await _running_again(db, name, sent) - sent)
                    cpu.append(server.cpu_seconds() - used)
    finally:
        db.close()
    stats = summary_ms(latencies)
    stats["server_cpu_ms_mean"] = round(1000 * sum(cpu) / max(1, len(cpu)), 2)  # /proc counts in ticks
    median = stats["median_ms"]
    return Row(
        5,
        f"Crash of one AlwaysOn VM until Running again, {sizes.fleet_vms:,} VMs",
        median,
        "ms (median)",
        "<= 20 ms",
        at_most(median, 20),
        details=stats,
        note="from sending the crash fault to the VM's Ready=True (server time), one VM at a time",
    )


async def _running_again(db: observe.Reader, name: str, after: float, timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = observe.vm_ready_since(db, name)
        if ready is not None and ready > after:
            return ready
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"VM {name} was not Running again within {timeout_s} s")


def idle(server: BenchServer, sizes: Sizes) -> Row:
    """CPU the server uses with nothing to do (resyncs and heartbeats only), and its memory."""
    server.wait_quiet()
    with server.profile("row7-idle"):
        cpu0, t0 = server.cpu_seconds(), time.monotonic()
        time.sleep(sizes.idle_s)
        cpu1, t1 = server.cpu_seconds(), time.monotonic()
    percent = 100 * (cpu1 - cpu0) / (t1 - t0)
    rss = server.rss_mib()
    return Row(
        7,
        f"Idle with {sizes.fleet_vms:,} VMs: CPU, and memory (RSS)",
        round(percent, 2),
        "% of one core",
        "<= 5 % of one core; RSS < 1 GiB",
        at_most(percent, 5) and rss < 1024,
        details={"window_s": round(t1 - t0, 1), "rss_mib": round(rss)},
    )


async def first_page(server: BenchServer, sizes: Sizes) -> Row:
    """``GET /v1/vms?limit=500``: the first page of the VM list, one request at a time."""
    samples: list[float] = []
    async with server.client() as client:
        with server.profile("row8-first-page"):
            for _ in range(sizes.pages):
                started = time.perf_counter()
                response = await client.get("/v1/vms", params={"limit": 500})
                response.raise_for_status()
                samples.append(time.perf_counter() - started)
                items = len(response.json()["items"])
    stats = summary_ms(samples)
    title = f"First page of 500 VMs out of {sizes.fleet_vms:,}"
    if items > 500:
        return Row(
            8,
            title,
            None,
            "ms (median)",
            "<= 50 ms",
            None,
            details={"items": items, "whole_list": stats},
            note=f"this build does not page lists: GET /v1/vms returned all {items} VMs "
            f"in {stats['median_ms']} ms (median)",
        )
    median = stats["median_ms"]
    return Row(8, title, median, "ms (median)", "<= 50 ms", at_most(median, 50), details=stats)
