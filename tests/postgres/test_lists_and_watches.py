"""Lists and watches of the live API over PostgreSQL, with writes from another replica.

A write by another replica commits no listener in this process: the watch of a follower
(which writes nothing itself) finds it by its poll, and misses nothing between the list's
revision and the stream.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
import uvicorn

from tests.conftest import make_plane
from tests.postgres.pg import schema_url
from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.server import ApiServer
from virtplane.store.store import Store

pytestmark = pytest.mark.postgres


@pytest.fixture
def served() -> Iterator[tuple[str, str, Store, Store]]:
    """(url, viewer token, the server's store, another replica's store) over one fresh schema."""
    with schema_url() as url:
        store, other = Store(url), Store(url)
        store.migrate()
        token = store.create_token("viewer", "viewer")
        # the other replica leads: this server is a follower, and nothing it runs writes here
        assert other.try_acquire_lease("controllers", "the-other-replica", datetime.now(UTC), 3600)
        plane = make_plane(store)
        plane.api_context.watch.poll_s = 0.1
        server = ApiServer(
            uvicorn.Config(plane.app(), host="127.0.0.1", port=0, log_level="warning", lifespan="on"),
            plane.api_context.streams,
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", token, store, other
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            store.close()
            other.close()


def vm(name: str, labels: dict[str, str]) -> VirtualMachine:
    return VirtualMachine(metadata=Metadata(name=name, labels=labels), spec=VirtualMachineSpec())


def test_pages_selectors_and_a_watch_of_another_replicas_writes(
    served: tuple[str, str, Store, Store],
) -> None:
    url, token, _, other = served
    for i in range(5):
        other.create(vm(f"vm-{i}", {"app": "web" if i % 2 else "db"}))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as client:
        first = client.get("/v1/vms", params={"labelSelector": "app=web", "limit": 1}).json()
        rest = client.get(
            "/v1/vms", params={"labelSelector": "app=web", "continue": first["metadata"]["continue"]}
        )
        assert [v["metadata"]["name"] for v in first["items"] + rest.json()["items"]] == ["vm-1", "vm-3"]

        revision = first["metadata"]["resource_version"]
        other.create(vm("vm-5", {"app": "web"}))  # after the list, before the watch
        params = {"watch": 1, "resource_version": revision, "labelSelector": "app=web"}
        with client.stream("GET", "/v1/vms", params=params) as stream:
            lines = stream.iter_lines()
            assert json.loads(next(lines))["type"] == "BOOKMARK"
            other.create(vm("vm-6", {"app": "web"}))
            other.create(vm("vm-7", {"app": "db"}))
            seen: list[str] = []
            while "vm-6" not in seen:
                event = json.loads(next(lines))
                if event["type"] == "ADDED":
                    seen.append(event["object"]["metadata"]["name"])
            assert seen == ["vm-5", "vm-6"]
