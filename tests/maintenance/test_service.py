"""The API writes spec, the controller writes status: a maintenance request (or a retry) stores
only the HostMaintenance's spec, and its answer shows the plan computed on the spot."""

from __future__ import annotations

import pytest

from tests.maintenance.conftest import Cluster
from virtplane.domain.resources import HostMaintenance, HostMaintenanceStatus, MaintenancePhase


def record_maintenance_writes(monkeypatch: pytest.MonkeyPatch, cluster: Cluster) -> list[HostMaintenance]:
    """Every HostMaintenance the store writes from now on, as written."""
    written: list[HostMaintenance] = []
    store = cluster.store
    for method in ("create", "update", "mutate"):
        original = getattr(store, method)

        def recording(*args: object, _original: object = original, **kwargs: object) -> object:
            result = _original(*args, **kwargs)  # type: ignore[operator]
            seen = {w.metadata.resource_version for w in written}
            if isinstance(result, HostMaintenance) and result.metadata.resource_version not in seen:
                written.append(result.model_copy(deep=True))  # (mutate writes through update)
            return result

        monkeypatch.setattr(store, method, recording)
    return written


async def test_a_request_stores_only_the_spec_and_answers_with_the_plan(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("a")
    await cluster.add_host("h2")
    written = record_maintenance_writes(monkeypatch, cluster)
    answer = cluster.request("h1")  # synchronous: no reconcile runs in between
    assert [w.status for w in written] == [HostMaintenanceStatus()], "the request wrote no status"
    assert answer["phase"] == "Draining"
    assert [(i["vm"], i["action"], i["target"]) for i in answer["plan"]["items"]] == [("a", "Migrate", "h2")]
    await cluster.wait_state("h1", "Maintenance")
    stored = cluster.maintenance("h1")
    assert stored.status.observed_generation == stored.metadata.generation
    assert [(i.vm, i.target) for i in stored.status.plan] == [("a", "h2")], "the controller stored the plan"


async def test_a_retry_bumps_the_request_and_leaves_the_status_to_the_controller(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("l", pool="h1-local")
    await cluster.add_host("h2")
    cluster.request("h1", "Error")
    await cluster.wait_state("h1", "ErrorInMaintenance")
    failed = cluster.maintenance("h1")
    assert failed.status.phase is MaintenancePhase.FAILED
    written = record_maintenance_writes(monkeypatch, cluster)
    answer = cluster.request("h1", "Migration")
    assert len(written) == 1 and written[0].status == failed.status, "the retry wrote no status"
    assert written[0].spec.request == failed.spec.request + 1
    assert answer["phase"] == "Draining" and answer["strategy"] == "Migration"
    assert [(i["vm"], i["action"]) for i in answer["plan"]["items"]] == [("l", "MigrateWithStorage")]
    await cluster.wait_state("h1", "Maintenance")
    assert cluster.maintenance("h1").status.strategy is not None
    assert cluster.maintenance("h1").status.strategy.value == "Migration"
