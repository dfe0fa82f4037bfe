"""Two control-plane replicas on one PostgreSQL database: only the lease holder reconciles."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from tests.conftest import eventually
from tests.postgres.pg import schema_url
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import (
    Capacity,
    Host,
    HostSpec,
    Metadata,
    RunPolicy,
    Secret,
    SecretSpec,
    VirtualMachine,
    VirtualMachineSpec,
)
from virtplane.drivers.sim import SimCloud
from virtplane.server import sim_factory
from virtplane.store.database import utcnow
from virtplane.store.sealing import Keyring
from virtplane.store.settings import Settings
from virtplane.store.store import Store

pytestmark = pytest.mark.postgres


def replica(store: Store, sim: SimCloud, name: str) -> ControlPlane:
    plane: ControlPlane
    plane = ControlPlane(
        store,
        sim=sim,
        driver_factory=sim_factory(sim, lambda: plane.cache.hosts()),
        options=ControlPlaneOptions(workers=2, replica_id=name, lease_s=1.5, renew_every_s=0.3),
    )
    return plane


def add_vm(store: Store, name: str) -> None:
    store.create(
        VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(run_policy=RunPolicy.ALWAYS_ON))
    )


def phase(store: Store, name: str) -> str:
    return store.get(VirtualMachine, name).status.phase.value


async def test_only_the_lease_holder_reconciles_and_the_other_takes_over() -> None:
    with schema_url() as url:
        first_store, second_store = Store(url), Store(url)
        first_store.migrate()
        sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02)  # the hosts both replicas reach
        first, second = replica(first_store, sim, "replica-1"), replica(second_store, sim, "replica-2")
        assert first.elector is not None and second.elector is not None, "on by default with PostgreSQL"
        try:
            await first.start()
            await eventually(lambda: first.elector is not None and first.elector.is_leader)
            await second.start()
            first_store.create(
                Host(
                    metadata=Metadata(name="h1"),
                    spec=HostSpec(uri="sim://h1", capacity=Capacity(vcpus=8, memory_mib=8192)),
                )
            )
            add_vm(first_store, "a")
            await eventually(lambda: phase(first_store, "a") == "Running")
            assert not second.elector.is_leader and second.controllers == {}, (
                "the follower runs no controller"
            )
            await first.stop()  # releases the lease at once
            await eventually(lambda: second.elector is not None and second.elector.is_leader, timeout=10)
            add_vm(second_store, "b")
            await eventually(lambda: phase(second_store, "b") == "Running")
            assert phase(second_store, "a") == "Running"
        finally:
            await second.stop()
            await first.stop()
            first_store.close()
            second_store.close()


async def test_a_follower_plans_maintenance_from_current_data_not_its_trailing_copy() -> None:
    """A plan asked of a follower just after the leader enabled a host sees that host.

    The follower's copy follows the leader's writes by a poll (made an hour here, so that
    only the catch-up on request can bring the copy up to date)."""
    import httpx

    from virtplane.api.app import create_app

    with schema_url() as url:
        first_store, second_store = Store(url), Store(url)
        first_store.migrate()
        sim = SimCloud(boot_seconds=0.0, shutdown_seconds=0.0)
        first = replica(first_store, sim, "replica-1")
        second: ControlPlane
        second = ControlPlane(
            second_store,
            sim=sim,
            driver_factory=sim_factory(sim, lambda: second.cache.hosts()),
            options=ControlPlaneOptions(
                workers=2, replica_id="replica-2", lease_s=1.5, renew_every_s=0.3, feed_poll_s=3600
            ),
        )
        token = first_store.create_token("admin", "admin")
        try:
            await first.start()
            await eventually(lambda: first.elector is not None and first.elector.is_leader)
            for name, enabled in (("h1", True), ("h2", False)):
                first_store.create(
                    Host(
                        metadata=Metadata(name=name),
                        spec=HostSpec(
                            uri=f"sim://{name}", capacity=Capacity(vcpus=8, memory_mib=8192), enabled=enabled
                        ),
                    )
                )
            add_vm(first_store, "a")
            await eventually(lambda: phase(first_store, "a") == "Running")
            await second.start()
            assert second.controllers_status()["role"] == "follower"
            assert second.controllers_status()["leader"] == "replica-1"

            h2 = first_store.get(Host, "h2")
            h2.spec.enabled = True
            first_store.update(h2)
            await eventually(lambda: first_store.get(Host, "h2").status.resource_state.value == "Enabled")
            on = first_store.get(VirtualMachine, "a").status.host
            app = create_app(second.api_context)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://follower",
                headers={"Authorization": f"Bearer {token}"},
            ) as client:
                response = await client.post(f"/v1/hosts/{on}/maintenance", json={"dry_run": True})
                health = (await client.get("/healthz")).json()
            assert response.status_code == 200, response.text
            items = response.json()["plan"]["items"]
            assert [(i["vm"], i["action"]) for i in items] == [("a", "Migrate")], items
            assert health["controllers"] == {
                "role": "follower",
                "replica": "replica-2",
                "leader": "replica-1",
            }
        finally:
            await second.stop()
            await first.stop()
            first_store.close()
            second_store.close()


async def test_only_the_lease_holder_prunes_the_change_feed() -> None:
    with schema_url() as url:
        store = Store(url, keyring=Keyring([Fernet.generate_key()]))  # a Secret's password is sealed
        store.migrate()
        Settings(store).set("store.changes.max_rows", 100)
        for i in range(150):
            store.create(
                Secret(metadata=Metadata(name=f"s-{i}"), spec=SecretSpec(username="u", password="p"))
            )
        assert store.try_acquire_lease("controllers", "another-replica", utcnow(), 3600)
        plane = replica(store, SimCloud(), "replica-1")
        plane.retention.every_s = 0.01
        try:
            await plane.start()
            assert plane.elector is not None
            await eventually(lambda: plane.elector is not None and plane.elector.attempts >= 3)
            assert store.compacted_revision() == 0, "a follower prunes nothing"
            store.release_lease("controllers", "another-replica")
            await eventually(lambda: store.compacted_revision() >= store.revision() - 100)
        finally:
            await plane.stop()
            store.close()
