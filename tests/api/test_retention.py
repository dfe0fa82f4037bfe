"""Retention through the real server: its settings, 410 for a watch from before the pruned
horizon, and the control plane pruning by itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, WallClock, eventually, eventually_sync, make_plane
from virtplane.domain.resources import EventType, Metadata, Secret, SecretSpec
from virtplane.server import ServeOptions, build
from virtplane.store.settings import Settings
from virtplane.store.store import Store, sqlite_url


def secret(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"username": "u", "password": "p"}}


def revision(client: Any) -> int:
    return int(client.get("/v1/secrets").json()["metadata"]["resource_version"])


def test_a_watch_from_before_the_pruned_horizon_is_410_and_one_after_it_resumes(
    live_server: LiveServer,
) -> None:
    clock = WallClock()
    live_server.store.clock = clock
    plane = live_server.plane
    with live_server.client("admin") as client:
        setting = client.patch("/v1/settings/store.changes.retention_s", json={"spec": {"value": 60}})
        assert setting.status_code == 200
        old = revision(client)
        assert client.post("/v1/secrets", json=secret("s-1")).status_code == 201
        plane.retention.prune_once()  # marks the time of s-1's change
        clock.advance(61)
        assert client.post("/v1/secrets", json=secret("s-2")).status_code == 201
        recent = revision(client)
        eventually_sync(lambda: plane.feed.revision >= recent)  # the server has read what it prunes
        assert plane.retention.prune_once().changes > 0
        assert old < live_server.store.compacted_revision() < recent

        gone = client.get("/v1/secrets", params={"watch": 1, "resource_version": old})
        assert gone.status_code == 410 and gone.json()["reason"] == "Expired"
        assert "list again" in gone.json()["message"]
        resumed = client.get("/v1/secrets", params={"watch": 1, "resource_version": recent, "timeout_s": 0.1})
        assert resumed.status_code == 200
        first = json.loads(resumed.text.splitlines()[0])
        assert first["type"] == "BOOKMARK" and first["object"]["metadata"]["resource_version"] == recent


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("store.changes.retention_s", -5, "minimum"),
        ("store.changes.retention_s", 30, "minimum"),
        ("store.changes.max_rows", 0, "minimum"),
        ("events.retention_s", "a day", "whole number"),
        ("events.max_rows", 10**12, "maximum"),
    ],
)
def test_retention_settings_refuse_bad_values_with_a_reason(
    live_server: LiveServer, key: str, value: Any, words: str
) -> None:
    with live_server.client("admin") as client:
        response = client.patch(f"/v1/settings/{key}", json={"spec": {"value": value}})
        assert response.status_code == 400 and response.json()["reason"] == "InvalidSetting"
        assert words in response.json()["message"]
        assert client.get(f"/v1/settings/{key}").json()["spec"]["value"] != value


async def test_the_control_plane_that_reconciles_prunes_by_itself(store: Store) -> None:
    Settings(store).set("store.changes.max_rows", 100)
    Settings(store).set("events.max_rows", 100)
    plane = make_plane(store)
    plane.retention.every_s = 0.02
    await plane.start()
    try:
        for i in range(150):
            store.create(
                Secret(metadata=Metadata(name=f"s-{i}"), spec=SecretSpec(username="u", password="p")),
                events=[("Secret", f"s-{i}", "Made", "", EventType.NORMAL)],
            )
        top = store.revision()
        await eventually(lambda: store.compacted_revision() >= top - 100)
        await eventually(lambda: len(store.list_events(limit=1000)) <= 100)
    finally:
        await plane.stop()


def test_a_server_started_on_a_database_made_before_retention_switches_it_to_incremental_vacuum(
    tmp_path: Path,
) -> None:
    old = Store(sqlite_url(tmp_path / "virtplane.db"))
    old.migrate()
    with old.connect() as connection:  # as before retention: no auto-vacuum
        raw = connection.connection.dbapi_connection
        assert raw is not None
        raw.executescript("PRAGMA auto_vacuum=NONE; VACUUM")
    old.close()
    plane, _, _ = build(ServeOptions(data_dir=tmp_path))
    try:
        assert plane.store.uses_incremental_vacuum()
    finally:
        plane.store.close()
