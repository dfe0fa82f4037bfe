"""The usage collector on a control plane of simulated hosts, read through the real app: the
usage API, /metrics (and promtool's check of it), and a deleted VM's history going with it.

Time is the test's: the simulator's counters and the collector's rounds both read ``clock``,
moved 10 s per round; each round is ``collect_once`` (the leader's loop would do the same).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import eventually, make_plane
from tests.deploy.tools import tool_or_skip
from tests.maintenance.conftest import Cluster
from virtplane.domain.resources import VirtualMachine
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimCloud, SimLoad
from virtplane.store.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def cluster(store: Store, clock: Clock) -> AsyncIterator[Cluster]:
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, clock=clock)
    plane = make_plane(store, sim=sim)
    plane.usage_collector.wall_clock = clock
    await plane.start()
    yield Cluster(plane, sim)
    await plane.stop()


async def rounds(cluster: Cluster, clock: Clock, count: int) -> None:
    for _ in range(count):
        clock.now += 10
        await cluster.plane.usage_collector.collect_once()


async def get(cluster: Cluster, path: str, role: str = "viewer") -> httpx.Response:
    transport = httpx.ASGITransport(app=cluster.plane.app())  # no lifespan: the plane runs
    token = cluster.store.create_token(f"t-{uuid.uuid4().hex[:8]}", role)
    async with httpx.AsyncClient(transport=transport, base_url="http://virtplane") as client:
        return await client.get(path, headers={"Authorization": f"Bearer {token}"})


async def test_a_busy_guest_shows_in_its_usage_and_its_hosts(cluster: Cluster, clock: Clock) -> None:
    await cluster.add_host("h1", vcpus=8, memory_mib=8192)
    vm = await cluster.add_vm("web", cpu=2, memory_mib=1024)
    cluster.sim.set_load(domain_name(vm.metadata.uid), SimLoad(cpu=0.75, memory=0.5, disk_write_bps=2e6))
    await rounds(cluster, clock, 3)
    answer = (await get(cluster, "/v1/vms/web/usage?since=15m")).json()
    assert answer["host"] == "h1" and answer["interval_s"] == 10.0
    assert len(answer["t"]) == len(answer["cpu_pct"]) and answer["t"] == sorted(answer["t"])
    assert answer["cpu_pct"][-2:] == [75.0, 75.0]  # the first round has no rate yet
    assert answer["memory_used_mib"][-1] == 512.0
    assert answer["disk_write_bps"][-1] == pytest.approx(2e6)
    assert answer["current"]["disks"][0]["name"] == "vda"
    host = (await get(cluster, "/v1/hosts/h1/usage?since=1h")).json()
    assert host["disk_write_bps"][-1] == pytest.approx(2e6)
    assert host["current"]["load1"] == 1.5
    assert 18 <= host["current"]["cpu_pct"] <= 21  # 1.5 of 8 CPUs, and the host's own bit


@pytest.mark.parametrize(
    ("since", "why"),
    [
        ("yesterday", "neither a duration"),
        ("2d", "24h back"),
        ("0m", "24h back"),
        ("2026-01-01T00:00:00", "offset"),
        ("2999-01-01T00:00:00Z", "future"),
    ],
)
async def test_a_bad_since_is_a_422_with_its_reason(cluster: Cluster, since: str, why: str) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("web")
    answer = await get(cluster, f"/v1/vms/web/usage?since={since}")
    assert answer.status_code == 422 and why in answer.json()["message"]


async def test_unknown_names_are_404_and_an_rfc3339_since_is_taken(cluster: Cluster, clock: Clock) -> None:
    await cluster.add_host("h1")
    await rounds(cluster, clock, 1)
    assert (await get(cluster, "/v1/vms/nope/usage")).status_code == 404
    assert (await get(cluster, "/v1/hosts/nope/usage")).status_code == 404
    answer = await get(cluster, "/v1/hosts/h1/usage?since=2020-01-01T00:00:00Z")
    assert answer.status_code == 200 and answer.json()["t"]


async def test_a_replica_that_does_not_collect_says_who_does(store: Store) -> None:
    plane = make_plane(store)  # not started: it collects nothing
    store.create(VirtualMachine.model_validate({"metadata": {"name": "web"}}))
    transport = httpx.ASGITransport(app=plane.app())
    token = store.create_token("t", "viewer")
    async with httpx.AsyncClient(transport=transport, base_url="http://virtplane") as client:
        answer = await client.get("/v1/vms/web/usage", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 503 and answer.json()["reason"] == "NotCollectedHere"


def _metrics(text: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("virtplane_vm_") and 'vm="web"' in line and 'host="' in line:
            name, value = line.split("{")[0], float(line.rsplit(" ", 1)[1])
            found[name, line.split('host="')[1].split('"')[0]] = value
    return found


async def test_metrics_per_vm_and_host_pass_promtool_and_end_with_the_vm(
    cluster: Cluster, clock: Clock
) -> None:
    import subprocess

    await cluster.add_host("h1")
    vm = await cluster.add_vm("web")
    cluster.sim.set_load(domain_name(vm.metadata.uid), SimLoad(cpu=1.0))
    await rounds(cluster, clock, 2)
    text = (await get(cluster, "/metrics")).text
    found = _metrics(text)
    assert found["virtplane_vm_cpu_seconds_total", "h1"] == pytest.approx(10.0)  # from its first look
    assert found["virtplane_vm_vcpus", "h1"] == 1.0
    assert 'virtplane_host_memory_bytes{host="h1"}' in text
    checked = subprocess.run(
        [tool_or_skip("promtool", "prometheus"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    cluster.store.delete(VirtualMachine, "web")
    await eventually(lambda: cluster.store.find(VirtualMachine, "web") is None)
    await rounds(cluster, clock, 6)  # deleted VMs are forgotten once a minute
    assert vm.metadata.uid not in cluster.plane.usage.vms
    assert not _metrics((await get(cluster, "/metrics")).text)


async def test_a_migrated_vm_has_no_rate_across_the_move(cluster: Cluster, clock: Clock) -> None:
    await cluster.add_host("h1")
    await cluster.add_host("h2")
    vm = await cluster.add_vm("web")
    cluster.sim.set_load(domain_name(vm.metadata.uid), SimLoad(cpu=0.5))
    await rounds(cluster, clock, 2)
    source = cluster.vm("web").status.host
    cluster.request(source)  # maintenance: the VM live-migrates away
    await eventually(lambda: cluster.vm("web").status.host not in (None, source))
    await rounds(cluster, clock, 2)
    answer: dict[str, Any] = (await get(cluster, "/v1/vms/web/usage")).json()
    assert answer["cpu_pct"][-3:] == [50.0, None, 50.0]  # the target's process starts anew
    assert answer["host"] != source


async def test_a_stopped_vm_drops_out_of_now_but_keeps_its_history(cluster: Cluster, clock: Clock) -> None:
    from virtplane.domain.resources import RunPolicy, VMPhase

    await cluster.add_host("h1")
    await cluster.add_vm("web")
    await rounds(cluster, clock, 2)
    assert _metrics((await get(cluster, "/metrics")).text)

    def off(vm: VirtualMachine) -> None:
        vm.spec.run_policy = RunPolicy.ALWAYS_OFF

    cluster.store.mutate(VirtualMachine, "web", off)
    await eventually(lambda: cluster.vm("web").status.phase is VMPhase.STOPPED)
    await rounds(cluster, clock, 3)
    assert not _metrics((await get(cluster, "/metrics")).text)
    answer = (await get(cluster, "/v1/vms/web/usage")).json()
    assert answer["current"] is None
    assert answer["memory_used_mib"][-5:] == [409.6, 409.6, None, None, None]


GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "virtplane-usage.json"


def _queried(dashboard: dict[str, Any]) -> set[str]:
    """The metric names in every panel's and variable's query."""
    texts = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    texts += [v.get("query", "") for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return set(re.findall(r"\bvirtplane_[a-z0-9_]+", " ".join(texts)))


async def test_every_metric_the_grafana_dashboard_queries_is_served(cluster: Cluster, clock: Clock) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("web")
    await rounds(cluster, clock, 2)
    text = (await get(cluster, "/metrics")).text
    served_samples = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")
    }
    queried = _queried(json.loads(GRAFANA.read_text()))
    assert len(queried) >= 15
    missing = sorted(name for name in queried if name not in served_samples)
    assert not missing, f"the dashboard queries metrics /metrics does not serve: {missing}"


async def test_placement_weighs_the_hosts_measured_use_when_the_setting_asks(
    cluster: Cluster, clock: Clock
) -> None:
    await cluster.add_host("roomy", vcpus=16, memory_mib=32768)
    await cluster.add_host("small", vcpus=16, memory_mib=16384)
    busy = await cluster.add_vm("busy", cpu=8)
    assert busy.status.host == "roomy"  # the most free memory
    cluster.sim.set_load(domain_name(busy.metadata.uid), SimLoad(cpu=1.0))
    await rounds(cluster, clock, 2)
    assert (await cluster.add_vm("by-allocation")).status.host == "roomy"  # the setting is off
    cluster.plane.settings.set("placement.real_use", True)
    assert (await cluster.add_vm("by-use")).status.host == "small"  # roomy is 50 % busy
