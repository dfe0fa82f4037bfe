"""A simulated cluster whose hosts have BMCs (the simulated one), with short liveness thresholds."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.maintenance.conftest import Cluster, make_plane
from virtplane.domain.resources import FencingSpec, Host, Metadata, RedfishFencing, Secret, SecretSpec
from virtplane.drivers.sim import SimCloud
from virtplane.fencing.sim import SimBmcs
from virtplane.store.store import Store

SETTINGS = {
    "host.liveness.disconnected_after_s": 0.1,
    "host.liveness.reconnected_after_s": 0.2,
    "host.fencing.after_s": 0.3,
    "host.fencing.retry_base_s": 0.05,
    "host.fencing.retry_cap_s": 0.2,
    "vm.start.backoff_base_s": 0.02,
    "vm.start.backoff_cap_s": 0.2,
}


class FencedCluster(Cluster):
    @property
    def bmcs(self) -> SimBmcs:
        bmcs = self.plane.bmcs
        assert bmcs is not None
        return bmcs

    def give_bmc(self, host: str) -> None:
        if self.store.find(Secret, "bmc") is None:
            self.store.create(
                Secret(metadata=Metadata(name="bmc"), spec=SecretSpec(username="root", password="pw"))
            )
        redfish = RedfishFencing(address="https://bmc.invalid", system_id=host, credentials_secret="bmc")
        self.store.mutate(Host, host, lambda h: setattr(h.spec, "fencing", FencingSpec(redfish=redfish)))

    def probe(self, host: str) -> None:
        """Have the host controller look now (a lost link sends no event, as in life)."""
        self.plane.enqueue("Host", host)

    def host_events(self, host: str) -> list[str]:
        return self.events("Host", host)


@pytest.fixture
async def cluster(store: Store) -> AsyncIterator[FencedCluster]:
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, time_scale=10.0, migration_tick_s=0.01)
    plane = make_plane(store, sim=sim)
    for key, value in SETTINGS.items():
        plane.settings.set(key, value)
    result = FencedCluster(plane, sim)
    await plane.start()
    yield result
    await plane.stop()
