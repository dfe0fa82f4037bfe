"""``settings get|set|reset``."""

from __future__ import annotations

import json

import httpx
import pytest

from .conftest import Invoke
from .fake_server import FakeServer, error

STRATEGY = "host.maintenance.local.storage.strategy"


@pytest.fixture(autouse=True)
def settings(server: FakeServer) -> None:
    strategy = server.add(
        "settings", {"kind": "Setting", "metadata": {"name": STRATEGY}, "spec": {"value": "Error"}}
    )
    strategy["status"] = {
        "type": "enum",
        "default": "Error",
        "allowed": ["Error", "Migration", "ForceStop", "Stop"],
        "description": "What maintenance does with running VMs on local storage.",
        "scope": "global",
    }
    limit = server.add(
        "settings",
        {"kind": "Setting", "metadata": {"name": "migration.outbound.per.host"}, "spec": {"value": 2}},
    )
    limit["status"] = {"type": "int", "default": 2, "scope": "global"}


def test_set_sends_the_value_as_a_string_for_the_server_to_coerce(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("settings", "set", STRATEGY, "Migration")

    assert result.exit_code == 0, result.output
    [request] = server.requests_to("PATCH", f"/v1/settings/{STRATEGY}")
    assert request.body == {"spec": {"value": "Migration"}}
    assert result.stdout.strip() == f"setting {STRATEGY} = Migration"


def test_set_shows_the_value_the_server_stored(invoke: Invoke, server: FakeServer) -> None:
    server.overrides[("PATCH", "/v1/settings/migration.outbound.per.host")] = httpx.Response(
        200, json={"metadata": {"name": "migration.outbound.per.host"}, "spec": {"value": 3}}
    )

    result = invoke("settings", "set", "migration.outbound.per.host", "3")

    assert server.requests[-1].body == {"spec": {"value": "3"}}
    assert result.stdout.strip() == "setting migration.outbound.per.host = 3"


def test_an_invalid_value_shows_the_servers_explanation(invoke: Invoke, server: FakeServer) -> None:
    server.overrides[("PATCH", f"/v1/settings/{STRATEGY}")] = error(
        400, "InvalidSetting", f"{STRATEGY} must be one of Error, Migration, ForceStop, Stop"
    )

    result = invoke("settings", "set", STRATEGY, "Teleport")

    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Error (InvalidSetting): {STRATEGY} must be one of Error, Migration, ForceStop, Stop"
    )


def test_get_lists_every_setting_with_value_and_default(invoke: Invoke) -> None:
    result = invoke("settings", "get")

    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.strip().splitlines()]
    assert lines == [
        ["KEY", "VALUE", "DEFAULT", "TYPE"],
        [STRATEGY, "Error", "Error", "enum"],
        ["migration.outbound.per.host", "2", "2", "int"],
    ]


def test_get_one_key_shows_allowed_values_and_description(invoke: Invoke) -> None:
    result = invoke("settings", "get", STRATEGY)

    assert result.exit_code == 0, result.output
    assert "Allowed:     Error, Migration, ForceStop, Stop" in result.stdout
    assert "Description: What maintenance does with running VMs on local storage." in result.stdout


def test_get_json_is_the_raw_setting(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("settings", "get", STRATEGY, "-o", "json")

    assert json.loads(result.stdout) == server.resources["settings"][STRATEGY]


def test_reset_deletes_the_override(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("settings", "reset", STRATEGY)

    assert result.exit_code == 0, result.output
    assert server.requests_to("DELETE", f"/v1/settings/{STRATEGY}")
    assert result.stdout.startswith(f"setting {STRATEGY} reset to its default")
