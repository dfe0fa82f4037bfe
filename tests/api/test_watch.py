"""Watches over the live server: ``GET /v1/{kind}?watch=1&resource_version=N`` streams JSON lines.

Every test reads the real stream through httpx; a line that never comes fails the test
by the client's read timeout, never by hanging.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.conftest import LiveServer, make_plane
from virtplane.domain.resources import (
    Metadata,
    Secret,
    SecretSpec,
)
from virtplane.server import ApiServer
from virtplane.store.store import Store, sqlite_url

Event = dict[str, Any]


class Watch:
    """One open watch stream, read a line at a time."""

    def __init__(self, client: httpx.Client, path: str, **params: Any) -> None:
        self._context = client.stream("GET", path, params={"watch": 1, **params})
        self.response = self._context.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("application/x-ndjson")
        self._lines = self.response.iter_lines()
        self.seen: list[Event] = []

    def next(self) -> Event:
        for line in self._lines:
            if line:
                event: Event = json.loads(line)
                self.seen.append(event)
                return event
        raise EOFError("the stream ended")

    def until(self, done: Callable[[Event], bool], limit: int = 200) -> list[Event]:
        events = []
        for _ in range(limit):
            events.append(self.next())
            if done(events[-1]):
                return events
        raise AssertionError(f"not seen in {limit} events: {events}")

    def rest(self) -> list[Event]:
        """Everything until the server ends the stream."""
        events = []
        while True:
            try:
                events.append(self.next())
            except EOFError:
                return events

    def close(self) -> None:
        self._context.__exit__(None, None, None)


@pytest.fixture
def watches() -> Iterator[Callable[..., Watch]]:
    opened: list[Watch] = []

    def open_watch(client: httpx.Client, path: str, **params: Any) -> Watch:
        opened.append(Watch(client, path, **params))
        return opened[-1]

    yield open_watch
    for watch in opened:
        watch.close()


def vm(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"run_policy": "AlwaysOff"},
    }


def named(name: str, kind: str | None = None) -> Callable[[Event], bool]:
    return lambda e: (
        e["object"].get("metadata", {}).get("name") == name and (kind is None or e["type"] == kind)
    )


def rv(event: Event) -> int:
    value: int = event["object"]["metadata"]["resource_version"]
    return value


def test_a_watch_streams_every_change_after_a_revision(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    with live_server.client("operator") as client:
        start = client.get("/v1/vms").json()["metadata"]["resource_version"]
        watch = watches(client, "/v1/vms", resource_version=start)
        first = watch.next()
        assert first == {
            "type": "BOOKMARK",
            "object": {"kind": "VirtualMachine", "metadata": {"resource_version": start}},
        }

        assert client.post("/v1/vms", json=vm("w-1")).status_code == 201
        added = watch.until(named("w-1"))[-1]
        assert added["type"] == "ADDED" and added["object"]["kind"] == "VirtualMachine"
        assert client.patch("/v1/vms/w-1", json={"spec": {"cpu": 2}}).status_code == 200
        modified = watch.until(lambda e: named("w-1", "MODIFIED")(e) and e["object"]["spec"]["cpu"] == 2)
        assert client.delete("/v1/vms/w-1").status_code == 200
        deleted = watch.until(named("w-1", "DELETED"))[-1]
        assert deleted["object"] == {
            "apiVersion": "virtplane.io/v1",
            "kind": "VirtualMachine",
            "metadata": {
                "name": "w-1",
                "resource_version": deleted["object"]["metadata"]["resource_version"],
            },
        }
        changes = [e for e in [added, *modified, deleted] if e["type"] != "BOOKMARK"]
        versions = [rv(e) for e in changes]
        assert versions == sorted(set(versions)), "each state once, in revision order"


def test_a_watch_from_a_lists_revision_misses_nothing(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    with live_server.client("operator") as client:
        client.post("/v1/vms", json=vm("before"))
        listed = client.get("/v1/vms").json()
        client.post("/v1/vms", json=vm("after"))  # made after the list was read
        watch = watches(client, "/v1/vms", resource_version=listed["metadata"]["resource_version"])
        assert watch.until(named("after"))[-1]["type"] == "ADDED"
        assert not any(e["type"] == "ADDED" and named("before")(e) for e in watch.seen)


def test_a_watch_resumes_after_a_disconnect_from_the_last_revision_seen(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    with live_server.client("operator") as client:
        start = client.get("/v1/vms").json()["metadata"]["resource_version"]
        first = watches(client, "/v1/vms", resource_version=start)
        client.post("/v1/vms", json=vm("r-1"))
        last = rv(first.until(named("r-1"))[-1])
        first.close()  # the client goes away

        client.patch("/v1/vms/r-1", json={"metadata": {"labels": {"while": "away"}}})
        client.post("/v1/vms", json=vm("r-2"))
        resumed = watches(client, "/v1/vms", resource_version=last)
        assert resumed.next()["object"]["metadata"]["resource_version"] == last  # the bookmark
        events = resumed.until(named("r-2"))
        assert all(rv(e) > last for e in events)
        assert any(named("r-1")(e) and e["object"]["metadata"]["labels"] == {"while": "away"} for e in events)


def test_a_revision_older_than_the_feed_keeps_is_410(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    with live_server.client("operator") as client:
        old = client.get("/v1/vms").json()["metadata"]["resource_version"]
        client.post("/v1/vms", json=vm("x-1"))
        client.post("/v1/vms", json=vm("x-2"))
        live_server.store.compact_changes(keep_last=1)
        response = client.get("/v1/vms", params={"watch": 1, "resource_version": old})
        assert response.status_code == 410
        assert response.json()["reason"] == "Expired"
        assert "list again" in response.json()["message"]
        response = client.get("/v1/events", params={"watch": "maybe"})
        assert response.status_code == 422 and response.json()["reason"] == "Invalid"


def test_a_watcher_that_falls_behind_compaction_gets_an_error_line(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    """Writes by another replica wake no one here: with a slow poll, the stream lags them.

    Secrets, because no controller writes when one changes: once the stream has shown the local
    one, it has read and waits, and only a local commit wakes it again.
    """
    live_server.plane.api_context.watch.poll_s = 3600
    live_server.plane.api_context.watch.heartbeat_s = 3600
    replica = Store(
        live_server.store.url, keyring=live_server.store.keyring
    )  # the same key, as replicas share
    try:
        with live_server.client("admin") as client:
            watch = watches(client, "/v1/secrets")  # from now
            rv(watch.next())
            live_server.store.create(secret("local"))  # a local commit: the stream reads it, then waits
            start = rv(watch.next())
            for i in range(3):
                replica.create(secret(f"s-{i}"))
            replica.compact_changes(keep_last=1)
            assert replica.compacted_revision() > start
            client.post("/v1/vms", json=vm("wake-up"))  # a local write wakes the stream
            error = watch.next()
            assert error["type"] == "ERROR"
            assert error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"
            assert watch.rest() == []  # and the stream ends
    finally:
        replica.close()


def secret(name: str) -> Secret:
    return Secret(metadata=Metadata(name=name), spec=SecretSpec(username="u", password="p"))


def test_a_selector_watch_sends_only_what_matches_and_a_deletion_when_it_stops(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    with live_server.client("operator") as client:
        watch = watches(client, "/v1/vms", labelSelector="app=web", fieldSelector="spec.run_policy=AlwaysOff")
        watch.next()
        client.post("/v1/vms", json=vm("db-1", {"app": "db"}))
        client.post("/v1/vms", json=vm("web-1", {"app": "web"}))
        assert watch.until(named("web-1"))[-1]["type"] == "ADDED"
        client.patch("/v1/vms/web-1", json={"metadata": {"labels": {"app": "db"}}})
        assert watch.until(named("web-1", "DELETED"))
        client.post("/v1/vms", json=vm("web-2", {"app": "web"}))
        watch.until(named("web-2"))
        assert not any(named("db-1")(e) for e in watch.seen)

        bad = client.get("/v1/vms", params={"watch": 1, "labelSelector": "app in web"})
        assert bad.status_code == 422 and bad.json()["position"] == 7


def test_a_quiet_watch_sends_bookmarks_that_move_past_other_kinds(
    live_server: LiveServer, watches: Callable[..., Watch]
) -> None:
    live_server.plane.api_context.watch.heartbeat_s = 0.2
    with live_server.client("admin") as client:
        watch = watches(client, "/v1/snapshots")
        start = rv(watch.next())
        client.post(
            "/v1/hosts", json={"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}
        )
        host_revision = client.get("/v1/hosts/h1").json()["metadata"]["resource_version"]
        beat = watch.until(lambda e: e["type"] == "BOOKMARK" and rv(e) >= host_revision)[-1]
        assert rv(beat) > start
        assert all(e["type"] == "BOOKMARK" for e in watch.seen)


def test_a_watch_ends_cleanly_at_its_timeout(live_server: LiveServer, watches: Callable[..., Watch]) -> None:
    with live_server.client("viewer") as client:
        watch = watches(client, "/v1/hosts", timeout_s=0.3)
        events = [watch.next(), *watch.rest()]
        assert events[0]["type"] == events[-1]["type"] == "BOOKMARK"


def test_events_follow_from_an_event_id(live_server: LiveServer, watches: Callable[..., Watch]) -> None:
    live_server.store.record_event("Host", "h1", "Before")
    with live_server.client("viewer") as client:
        newest = client.get("/v1/events", params={"limit": 1}).json()["metadata"]["resource_version"]
        watch = watches(client, "/v1/events", resource_version=newest)
        assert rv(watch.next()) == newest
        live_server.store.record_event("Host", "h1", "First")
        live_server.store.record_event("VirtualMachine", "v1", "Second")
        first, second = watch.next(), watch.next()
        assert (first["type"], first["object"]["reason"]) == ("ADDED", "First")
        assert second["object"]["reason"] == "Second" and second["object"]["id"] == first["object"]["id"] + 1

        only_vms = watches(client, "/v1/events", resource_version=newest, kind="vms")
        only_vms.next()
        assert only_vms.next()["object"]["reason"] == "Second"


def test_shutdown_ends_open_watches_cleanly(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "shutdown.db"))
    store.migrate()
    token = store.create_token("viewer", "viewer")
    plane = make_plane(store)
    config = uvicorn.Config(plane.app(), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = ApiServer(config, plane.api_context.streams)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as client:
            watch = Watch(client, "/v1/vms")
            start = watch.next()
            server.should_exit = True
            rest = watch.rest()  # the stream ends: no read timeout, no broken chunk
            assert rest and rest[-1]["type"] == "BOOKMARK" and rv(rest[-1]) >= rv(start)
            watch.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the server did not shut down"
        assert len(plane.api_context.streams) == 0
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()
