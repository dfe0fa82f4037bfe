"""A simulated cluster whose hosts have BMCs (the simulated one), with short liveness thresholds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.maintenance.conftest import Cluster, make_plane
from virtplane.domain.resources import (
    FencingSpec,
    Host,
    Metadata,
    RedfishFencing,
    Resource,
    Secret,
    SecretSpec,
)
from virtplane.drivers.sim import SimCloud
from virtplane.drivers.sim._host import SimHost
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


@dataclass
class HeldBoots:
    """Boots on one simulated host that last until the test ends them (``release``): a started
    domain stays Starting, as a slow guest's does, however fast or slow the machine runs.
    ``most`` is the most boots that were in progress there at one instant, over the whole run."""

    sim: SimCloud
    host: str
    held: list[tuple[SimHost, Any]] = field(default_factory=list)
    most: int = 0

    def hold(self, host: SimHost, domain: Any) -> None:
        self.held.append((host, domain))
        self.most = max(self.most, len(self.held))

    def release(self) -> None:
        """The guests of the held boots are up: their domains run."""
        with self.sim.transaction:
            for host, domain in self.held:
                host.finish_boot(domain)
        self.held.clear()


@pytest.fixture
def held_boots(cluster: FencedCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``held_boots("h2")`` holds every boot started on h2 from then on (see ``HeldBoots``)."""
    holders: list[HeldBoots] = []
    schedule = SimHost._schedule_boot

    def scheduling(host: SimHost, domain: Any, *, fail: bool, delay: float | None = None) -> None:
        holder = next((h for h in holders if h.host == host.name), None)
        if holder is None or fail or delay is not None:  # a loaded or failing boot runs its course
            schedule(host, domain, fail=fail, delay=delay)
            return
        holder.hold(host, domain)

    monkeypatch.setattr(SimHost, "_schedule_boot", scheduling)

    def hold(host: str) -> HeldBoots:
        holders.append(HeldBoots(cluster.sim, host))
        return holders[-1]

    yield hold


def on_every_write(monkeypatch: pytest.MonkeyPatch, store: Store, seen: Callable[[Resource], None]) -> None:
    """``seen(obj)`` for every object a write stores from now on, just before it is stored: the
    complete record, not samples (``update``, ``mutate`` and the controllers' group commits all
    store through ``_apply``)."""
    apply = store._apply

    def recording_apply(connection: Any, obj: Resource, *args: Any) -> Any:
        seen(obj)
        return apply(connection, obj, *args)

    monkeypatch.setattr(store, "_apply", recording_apply)
