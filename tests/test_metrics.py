"""The metrics the alert rules read (``virtplane.metrics``), scraped from the real app's /metrics
while a control plane on simulated hosts lives through the facts they report."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import eventually, make_plane
from tests.maintenance.conftest import Cluster
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import HostConnection, RunPolicy, VirtualMachine
from virtplane.drivers.sim import SimCloud
from virtplane.server import sim_factory
from virtplane.store.store import Store, sqlite_url

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(plane: ControlPlane) -> Samples:
    """GET /metrics of the plane's app, as Prometheus would, parsed by Prometheus' own parser."""
    transport = httpx.ASGITransport(app=plane.app())  # no lifespan: the plane already runs
    token = plane.store.create_token(f"scrape-{uuid.uuid4().hex[:8]}", "viewer")  # /metrics needs one
    async with httpx.AsyncClient(transport=transport, base_url="http://virtplane") as client:
        response = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture
async def cluster(store: Store) -> AsyncIterator[Cluster]:
    """Simulated hosts that boot in 10 ms and migrate 1 GiB in about 0.1 s; fast start retries."""
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, time_scale=10.0, migration_tick_s=0.01)
    plane = make_plane(store, sim=sim)
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    plane.settings.set("vm.start.backoff_cap_s", 0.2)
    await plane.start()
    yield Cluster(plane, sim)
    await plane.stop()


async def test_a_vm_whose_start_keeps_failing_is_not_in_its_desired_power_state(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("web", policy=RunPolicy.ALWAYS_ON)
    await cluster.add_vm("archive", running=False)  # stopped, as its policy (now AlwaysOff) asks
    samples = await scrape(cluster.plane)
    assert value(samples, "virtplane_vm_in_desired_power_state", vm="web") == 1.0
    assert value(samples, "virtplane_vm_in_desired_power_state", vm="archive") == 1.0

    cluster.fault("h1", "fail-start", "web", count=1000)
    cluster.fault("h1", "crash", "web")  # AlwaysOn: started again, and again, failing each time
    await eventually(lambda: cluster.vm("web").status.start_failures >= 2)
    samples = await scrape(cluster.plane)
    assert value(samples, "virtplane_vm_in_desired_power_state", vm="web") == 0.0
    assert value(samples, "virtplane_vm_in_desired_power_state", vm="archive") == 1.0


async def test_a_vm_not_reconciled_yet_is_not_in_its_desired_power_state(store: Store) -> None:
    plane = make_plane(store)  # not started: nothing reconciles
    plane.cache.put(store.create(VirtualMachine.model_validate({"metadata": {"name": "new"}})))
    samples = await scrape(plane)
    assert value(samples, "virtplane_vm_in_desired_power_state", vm="new") == 0.0


async def test_a_host_in_error_in_maintenance_and_the_failed_migrations_are_reported(
    cluster: Cluster,
) -> None:
    for host in ("h1", "h2", "h3"):
        await cluster.add_host(host)
    await cluster.add_vm("v0")
    assert cluster.vm("v0").status.host == "h1"
    samples = await scrape(cluster.plane)
    assert value(samples, "virtplane_migrations_total", result="failed") == 0.0, "exported before any"
    assert value(samples, "virtplane_host_resource_state", host="h1", state="Enabled") == 1.0

    cluster.fault("h1", "fail-migration", "v0", count=2)  # both other hosts are tried, and fail
    cluster.request("h1")
    await cluster.wait_state("h1", "ErrorInMaintenance")
    samples = await scrape(cluster.plane)
    assert value(samples, "virtplane_migrations_total", result="failed") == 2.0
    assert value(samples, "virtplane_migrations_total", result="completed") == 0.0
    states = {
        state: value(samples, "virtplane_host_resource_state", host="h1", state=state)
        for state in ("Enabled", "PrepareForMaintenance", "ErrorInMaintenance", "Maintenance")
    }
    assert states == {
        "Enabled": 0.0,
        "PrepareForMaintenance": 0.0,
        "ErrorInMaintenance": 1.0,
        "Maintenance": 0.0,
    }

    cluster.request("h1")  # a retry: the faults are used up, the VM moves
    await cluster.wait_state("h1", "Maintenance")
    samples = await scrape(cluster.plane)
    assert value(samples, "virtplane_migrations_total", result="completed") == 1.0
    assert value(samples, "virtplane_host_resource_state", host="h1", state="ErrorInMaintenance") == 0.0


async def test_a_host_that_cannot_be_reached_is_reported_by_its_connection(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_host("h2")
    cluster.plane.settings.set("host.liveness.disconnected_after_s", 0.1)
    cluster.fault("h2", "disconnect")

    def disconnected() -> bool:  # after 0.1 s of silence; Down only once fenced (issue 15)
        cluster.plane.enqueue("Host", "h2")
        return cluster.host("h2").status.connection is HostConnection.DISCONNECTED

    await eventually(disconnected)
    samples = await scrape(cluster.plane)
    h2 = {
        c: value(samples, "virtplane_host_connection", host="h2", connection=c.value) for c in HostConnection
    }
    assert h2 == {c: float(c is HostConnection.DISCONNECTED) for c in HostConnection}
    assert value(samples, "virtplane_host_connection", host="h1", connection="Up") == 1.0


def replica(path: Path, name: str) -> ControlPlane:
    """A control plane that campaigns for the lease, as replicas on PostgreSQL do (here on SQLite)."""
    store = Store(sqlite_url(path))
    store.migrate()
    sim = SimCloud()
    plane: ControlPlane
    plane = ControlPlane(
        store,
        sim=sim,
        driver_factory=sim_factory(sim, lambda: plane.cache.hosts()),
        options=ControlPlaneOptions(
            # a lease long enough that a busy machine (CI runs two suites at once) cannot let it
            # run out between a check of the leadership and the scrape that reports it
            workers=1,
            leader_election=True,
            replica_id=name,
            lease_s=3.0,
            renew_every_s=0.3,
        ),
    )
    return plane


async def test_each_replica_reports_its_leadership_and_how_often_it_won_the_lease(tmp_path: Path) -> None:
    first, second = replica(tmp_path / "store.db", "r1"), replica(tmp_path / "store.db", "r2")
    try:
        await first.start()
        await eventually(lambda: first.elector is not None and first.elector.is_leader)
        await second.start()
        await eventually(lambda: second.elector is not None and second.elector.attempts > 0)
        one, two = await scrape(first), await scrape(second)
        assert value(one, "virtplane_leader", lease="controllers") == 1.0
        assert value(one, "virtplane_leader_acquisitions_total", lease="controllers") == 1.0
        assert value(two, "virtplane_leader", lease="controllers") == 0.0
        assert value(two, "virtplane_leader_acquisitions_total", lease="controllers") == 0.0

        await first.stop()  # hands the lease over
        await eventually(lambda: second.elector is not None and second.elector.is_leader)
        two = await scrape(second)
        assert value(two, "virtplane_leader", lease="controllers") == 1.0
        assert value(two, "virtplane_leader_acquisitions_total", lease="controllers") == 1.0
    finally:
        await second.stop()
        await first.stop()
        first.store.close()
        second.store.close()


async def test_one_process_per_store_reports_no_leadership(store: Store) -> None:
    plane = make_plane(store)  # SQLite, no election: the data directory's lock decides
    samples = await scrape(plane)
    assert not [key for key in samples if key[0].startswith("virtplane_leader")]
