"""Volumes made through the API: the finalizer comes with the creation, so the controller's
first look creates the file and writes Ready, one write (issue 13, row 1)."""

from __future__ import annotations

from tests.conftest import LiveServer, eventually_sync, wait_json
from tests.controllers.helpers import api_host_and_shared_pool
from virtplane.domain.resources.volume import VOLUME_FINALIZER


def test_a_volume_is_created_with_its_finalizer_and_made_ready_in_one_write(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        api_host_and_shared_pool(admin)
        # the one write is the look that finds a connected host seeing the pool: before h1's
        # first probe the controller writes Pending (no host yet) and looks again
        wait_json(admin, "/v1/hosts/h1", lambda h: h["status"]["connection"] == "Up")
        volume = {
            "metadata": {"name": "data", "finalizers": ["mine"]},
            "spec": {"pool": "shared", "size_gib": 1},
        }
        created = admin.post("/v1/volumes", json=volume)
        assert created.status_code == 201, created.text
        assert created.json()["metadata"]["finalizers"] == [VOLUME_FINALIZER]  # not the user's
        ready = wait_json(admin, "/v1/volumes/data", lambda v: v["status"]["phase"] == "Ready")
        assert ready["metadata"]["finalizers"] == [VOLUME_FINALIZER]
        writes = [c.op for c in live_server.plane.store.changes_since(0) if c.name == "data"]
        assert writes == ["added", "modified"]

        assert admin.delete("/v1/volumes/data").status_code in (200, 202)
        eventually_sync(lambda: admin.get("/v1/volumes/data").status_code == 404)
