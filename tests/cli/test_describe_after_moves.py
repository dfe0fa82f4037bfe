"""``virtplane describe vm`` after each move (issue 39): two live migrations, then a drain of the
host it runs on; its Scheduled condition names the host it is on, every time. Over HTTP, on a
live server whose simulated hosts migrate in a few ticks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import LiveServer, eventually_sync, make_plane, serving
from virtplane.cli.main import app
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store

HOSTS = ("h1", "h2", "h3")


@pytest.fixture
def fast_server(store: Store) -> Iterator[LiveServer]:
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, time_scale=10.0, migration_tick_s=0.01)
    with serving(store, make_plane(store, sim=sim), name="moves") as live:
        yield live


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    response = client.post(path, json=body)
    assert response.status_code in (200, 201, 202), response.text


def scheduled_row(server: LiveServer) -> str:
    """The Scheduled row of ``describe vm db-1``'s conditions table."""
    result = CliRunner().invoke(
        app,
        ["--url", server.url, "--token", server.tokens["viewer"], "describe", "vm", "db-1"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.output.splitlines() if line.split()[:1] == ["Scheduled"]]
    return row


def on(client: httpx.Client, host: str) -> bool:
    vm = client.get("/v1/vms/db-1").json()
    return bool(vm["status"]["host"] == host and vm["status"]["phase"] == "Running")


def test_describe_names_the_current_host_after_two_migrations_and_a_drain(fast_server: LiveServer) -> None:
    with fast_server.client("admin") as client:
        _post(client, "/v1/hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
        _post(client, "/v1/vms", {"metadata": {"name": "db-1"}, "spec": {"run_policy": "AlwaysOn"}})
        eventually_sync(lambda: on(client, "h1"))
        for name in HOSTS[1:]:
            _post(client, "/v1/hosts", {"metadata": {"name": name}, "spec": {"uri": f"sim://{name}"}})
        eventually_sync(
            lambda: all(h["status"]["connection"] == "Up" for h in client.get("/v1/hosts").json()["items"])
        )
        assert re.search(r"Scheduled\s+True\s+Scheduled\s.*placed on h1\b", scheduled_row(fast_server))

        for number, target in enumerate(("h2", "h3"), start=1):
            operation = {
                "metadata": {"name": f"move-{number}"},
                "spec": {"vm": "db-1", "type": "Migrate", "migrate": {"target_host": target}},
            }
            _post(client, "/v1/operations", operation)
            eventually_sync(lambda target=target: on(client, target))
            row = scheduled_row(fast_server)
            assert re.search(rf"Scheduled\s+True\s+Migrated\s.*placed on {target}\b", row), row

        _post(client, "/v1/hosts/h3/maintenance", {"strategy": "Migration"})
        eventually_sync(
            lambda: client.get("/v1/hosts/h3").json()["status"]["resource_state"] == "Maintenance"
        )
        drained_to = client.get("/v1/vms/db-1").json()["status"]["host"]
        assert drained_to in ("h1", "h2")
        eventually_sync(lambda: on(client, drained_to))
        row = scheduled_row(fast_server)
        assert re.search(rf"Scheduled\s+True\s+Migrated\s.*placed on {drained_to}\b", row), row
