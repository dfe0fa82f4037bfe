"""Row 6: draining a host of VMs of mixed sizes, against the lower bound of the limits.

The source ``drain-0`` runs the VMs; two targets take them, as in the demo (three hosts,
one drained): ``drain-1`` with much more free memory than ``drain-2``, and one VM each
that anti-affinity keeps off one of them. The simulator's default link (1,000 MiB/s,
advancing in ticks of 0.05 s, no dirty pages) moves a VM of M MiB in
``ceil(M / (1000 * 0.05))`` ticks; the default limits allow 2 migrations out of a host,
1 into a host and 5 in a cluster. The lower bound of the makespan is the largest of

- the longest single migration,
- the sum of all migrations over the parallelism the limits allow
  (``min(outbound, per cluster, inbound x targets)``),
- for each target, the migrations only it can take over its inbound limit.

The makespan is the maintenance's own ``finished_at - started_at``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from bench import observe
from bench.rows import Row, at_most
from bench.seed import host, running_vm, seed
from bench.server import BenchServer
from bench.sizes import Sizes
from virtplane.domain.resources import Resource

SOURCE = "drain-0"
TARGETS = {"drain-1": 196608, "drain-2": 49152}  # MiB: one roomy target, one small one
SIZES_MIB = (128, 256, 512, 1024, 2048)
LINK_MIB_S = 1000.0  # SimCloud's defaults
TICK_S = 0.05
LIMITS = {"outbound": 2, "inbound": 1, "per_cluster": 5}  # the settings' defaults
# a VM that anti-affinity keeps off a target, by the group of a VM already there
PINNED = {"drain-1": "pin-a", "drain-2": "pin-b"}


def migration_seconds(memory_mib: float, link_mib_s: float = LINK_MIB_S, tick_s: float = TICK_S) -> float:
    """How long the simulator takes to live-migrate an idle guest of ``memory_mib``."""
    return math.ceil(memory_mib / (link_mib_s * tick_s)) * tick_s


def lower_bound(
    durations: Mapping[str, float],
    only_target: Mapping[str, str],
    targets: int,
    *,
    outbound: int,
    inbound: int,
    per_cluster: int,
) -> float:
    """No schedule under the limits can finish sooner (see the module docstring)."""
    parallel = min(outbound, per_cluster, inbound * targets)
    forced: dict[str, float] = defaultdict(float)
    for vm, target in only_target.items():
        forced[target] += durations[vm]
    return max(
        max(durations.values(), default=0.0),
        sum(durations.values()) / parallel,
        max(forced.values(), default=0.0) / inbound,
    )


def drained_vms(count: int) -> dict[str, int]:
    """Name → memory of the VMs on the source: the sizes in turn."""
    return {f"d-{i:03d}": SIZES_MIB[i % len(SIZES_MIB)] for i in range(count)}


def objects(count: int) -> list[Resource]:
    found: list[Resource] = [host(SOURCE)]
    found += [host(name, memory_mib=memory) for name, memory in TARGETS.items()]
    vms = drained_vms(count)
    pinned_to = _pinned(vms)
    for name, memory in vms.items():
        group = next((PINNED[off] for off, vm in pinned_to.items() if vm == name), None)
        found.append(running_vm(name, SOURCE, memory_mib=memory, anti_affinity_group=group))
    for target, group in PINNED.items():  # the residents that keep the pinned VMs off their host
        found.append(running_vm(f"resident-{target}", target, anti_affinity_group=group))
    return found


def _pinned(vms: Mapping[str, int]) -> dict[str, str]:
    """Target a VM is kept off → that VM: the two largest VMs, one per target."""
    largest = sorted(vms, key=lambda name: (-vms[name], name))[: len(PINNED)]
    return dict(zip(PINNED, largest, strict=False))


async def run(work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None) -> list[Row]:
    del ceiling  # a ratio to the lower bound, not a rate
    data = work / "drain"
    seed(data, objects(sizes.drain_vms))
    server = BenchServer(data, link_mib_s=LINK_MIB_S, migration_tick_s=TICK_S, profile_dir=profile_dir)
    server.start()
    try:
        observe.wait_ready_since(server.db_path, server.launched_at, sizes.drain_vms + len(PINNED))
        server.wait_quiet()
        return [await drain(server, sizes)]
    finally:
        server.stop()


async def drain(server: BenchServer, sizes: Sizes) -> Row:
    vms = drained_vms(sizes.drain_vms)
    durations = {name: migration_seconds(memory) for name, memory in vms.items()}
    other = {a: b for a, b in zip(TARGETS, reversed(list(TARGETS)), strict=True)}
    only_target = {vm: other[off] for off, vm in _pinned(vms).items()}
    bound = lower_bound(durations, only_target, len(TARGETS), **LIMITS)
    cpu = server.cpu_seconds()
    async with server.client() as client:
        with server.profile("row6-drain"):
            response = await client.post(f"/v1/hosts/{SOURCE}/maintenance", json={"strategy": "Migration"})
            response.raise_for_status()
            deadline = time.monotonic() + 20 * bound + 60
            while True:
                shown = (await client.get(f"/v1/hosts/{SOURCE}/maintenance")).json()
                if shown["phase"] in ("Completed", "Failed") or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
    planned: dict[str, float] = defaultdict(float)
    for item in shown["plan"]["items"]:
        if item.get("target"):
            planned[item["target"]] += durations.get(item["vm"], 0.0)
    title = f"Drain of a host with {sizes.drain_vms} VMs of mixed sizes (2 targets, default limits)"
    if shown["phase"] != "Completed":
        return Row(6, title, None, "x lower bound", "<= 1.05", False, note=f"drain ended {shown['phase']}")
    makespan = observe.parse_time(shown["finished_at"]) - observe.parse_time(shown["started_at"])
    ratio = makespan / bound
    return Row(
        6,
        title,
        round(ratio, 3),
        "x lower bound",
        "<= 1.05",
        at_most(ratio, 1.05),
        details={
            "makespan_s": round(makespan, 2),
            "lower_bound_s": round(bound, 2),
            "migration_seconds_total": round(sum(durations.values()), 2),
            "planned_seconds_per_target": {t: round(s, 2) for t, s in sorted(planned.items())},
            "migrated": len(shown["migrated_vms"]),
            "server_cpu_s": round(server.cpu_seconds() - cpu, 1),
        },
        note=f"makespan {makespan:.2f} s, lower bound {bound:.2f} s",
    )
