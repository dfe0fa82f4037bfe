"""Admission answers from data at least as new as anything a client could have read.

The API's checks read the in-memory cache, which the change feed keeps current; a write
that reaches the store by another path (another replica, or just before the feed's next
delivery) is in the store, and so in a GET, before it is in the cache. Admission catches
the cache up with the store first, on the event loop where the cache is updated.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import eventually
from virtplane.api.app import create_app
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import (
    Metadata,
    OperationPhase,
    OperationType,
    Resource,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.store.store import Store, sqlite_url


class RecordingAdmission:
    """Passes every check on to the real admission and records the thread it ran on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.threads: set[int] = set()

    def on_create(self, obj: Resource) -> Resource:
        self.threads.add(threading.get_ident())
        result: Resource = self.inner.on_create(obj)
        return result

    def on_update(self, current: Resource, new: Resource) -> Resource:
        self.threads.add(threading.get_ident())
        result: Resource = self.inner.on_update(current, new)
        return result

    def claims_of(self, obj: Resource) -> Any:
        return self.inner.claims_of(obj)  # pure: no cache read, so any thread

    def on_delete(self, current: Resource) -> None:
        self.threads.add(threading.get_ident())
        self.inner.on_delete(current)


@pytest.fixture
async def api_replica(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, httpx.AsyncClient, Store]]:
    """The API and its cache over a store, with no controllers (a follower's view), and a
    second connection to the same database that writes behind the feed's back."""
    url = sqlite_url(tmp_path / "db.sqlite")
    store, other = Store(url), Store(url)
    store.migrate()
    plane = ControlPlane(store, options=ControlPlaneOptions(feed_poll_s=3600))
    feed = asyncio.create_task(plane.feed.run(plane.cache.load()))
    token = store.create_token("operator", "operator")
    app = create_app(plane.api_context)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://api",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        yield plane, client, other
    feed.cancel()
    store.close()
    other.close()


def operation(name: str, kind: OperationType) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"vm": "m", "type": kind.value}}


async def test_an_operation_seen_completed_never_blocks_the_next_one(
    api_replica: tuple[ControlPlane, httpx.AsyncClient, Store],
) -> None:
    plane, client, other = api_replica
    store = plane.store
    vm = store.create(
        VirtualMachine(metadata=Metadata(name="m"), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))
    )
    vm.status.phase = VMPhase.RUNNING
    store.update(vm)
    first = store.create(
        VirtualMachineOperation(
            metadata=Metadata(name="first"),
            spec=VirtualMachineOperationSpec(vm="m", type=OperationType.STOP),
        )
    )
    first.status.phase = OperationPhase.IN_PROGRESS
    store.update(first)
    await eventually(
        lambda: [o.status.phase for o in plane.cache.operations_of("m")] == [OperationPhase.IN_PROGRESS]
    )
    # the operation ends, written where the feed does not hear of it until its next poll
    first = other.get(VirtualMachineOperation, "first")
    first.status.phase = OperationPhase.COMPLETED
    other.update(first)

    seen = (await client.get("/v1/operations/first")).json()
    assert seen["status"]["phase"] == "Completed"
    response = await client.post("/v1/operations", json=operation("second", OperationType.STOP))
    assert response.status_code == 201, response.text


async def test_admission_runs_on_the_event_loop(
    api_replica: tuple[ControlPlane, httpx.AsyncClient, Store],
) -> None:
    """The cache is changed on the loop only; a check run from the thread pool could see it
    half-changed (or fail iterating a set another thread changes)."""
    plane, client, _ = api_replica
    recording = RecordingAdmission(plane.api_context.admission)
    plane.api_context.admission = recording
    loop_thread = threading.get_ident()
    body = {"metadata": {"name": "m"}, "spec": {"run_policy": "Manual"}}
    assert (await client.post("/v1/vms", json=body)).status_code == 201
    assert (await client.patch("/v1/vms/m", json={"metadata": {"labels": {"a": "b"}}})).status_code == 200
    assert (await client.post("/v1/operations", json=operation("op", OperationType.START))).status_code in (
        201,
        409,
    )
    assert recording.threads == {loop_thread}


async def test_a_second_operation_while_the_first_is_still_pending_is_refused_not_a_500(
    api_replica: tuple[ControlPlane, httpx.AsyncClient, Store],
) -> None:
    """Two operations sent at once: the second is checked against the first before a
    controller took it (Pending, with a creation time; the new one has none yet)."""
    plane, client, _ = api_replica
    vm = plane.store.create(
        VirtualMachine(metadata=Metadata(name="m"), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))
    )
    vm.status.phase = VMPhase.STOPPED
    plane.store.update(vm)
    assert (
        await client.post("/v1/operations", json=operation("one", OperationType.START))
    ).status_code == 201
    second = await client.post("/v1/operations", json=operation("two", OperationType.START))
    assert second.status_code == 409, second.text
    assert second.json()["reason"] == "OperationInProgress"


async def test_an_object_the_api_creates_is_in_the_cache_and_never_read_back(
    api_replica: tuple[ControlPlane, httpx.AsyncClient, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13, row 1: the change feed read every object a POST had made back from the store
    (a query and a validation per write) though the route held it in hand."""
    plane, client, _ = api_replica
    read_back: list[str] = []
    get_many = plane.store.get_many

    def counted(cls: type[Any], names: Any) -> Any:
        read_back.extend(names)
        return get_many(cls, names)

    monkeypatch.setattr(plane.store, "get_many", counted)
    doc = {"metadata": {"name": "m"}, "spec": {"run_policy": RunPolicy.MANUAL.value}}
    created = await client.post("/v1/vms", json=doc)
    assert created.status_code == 201, created.text
    revision = created.json()["metadata"]["resource_version"]
    held = plane.cache.vm("m")
    assert held is not None and held.metadata.resource_version == revision
    await plane.feed.catch_up()  # the feed has seen the change: it had nothing to read
    assert plane.feed.revision >= revision and read_back == []
