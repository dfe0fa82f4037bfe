"""``settings get|set|reset`` against the server's own registry."""

from __future__ import annotations

import json

from tests.conftest import LiveServer

from .conftest import Invoke, RecordingTransport, read

STRATEGY = "host.maintenance.local.storage.strategy"
OUTBOUND = "migration.max_outbound_per_host"


def test_set_sends_the_value_as_a_string_for_the_server_to_coerce(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("settings", "set", OUTBOUND, "3")

    assert result.exit_code == 0, result.output
    [request] = sent.to("PATCH", f"/v1/settings/{OUTBOUND}")
    assert request.body == {"spec": {"value": "3"}}
    assert result.stdout.strip() == f"setting {OUTBOUND} = 3"
    assert server.plane.settings.get_int(OUTBOUND) == 3, "stored as a number"


def test_an_invalid_value_shows_the_servers_explanation(invoke: Invoke, server: LiveServer) -> None:
    result = invoke("settings", "set", STRATEGY, "Teleport")

    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error (InvalidSetting): {STRATEGY}"), result.stderr
    for allowed in ("Error", "Migration", "ForceStop", "Stop"):
        assert allowed in result.stderr
    assert server.plane.settings.get_str(STRATEGY) == "Error"


def test_get_lists_every_setting_with_value_and_default(invoke: Invoke, server: LiveServer) -> None:
    invoke("settings", "set", OUTBOUND, "3")

    result = invoke("settings", "get")

    assert result.exit_code == 0, result.output
    header, *rows = [line.split() for line in result.stdout.strip().splitlines()]
    assert header == ["KEY", "VALUE", "DEFAULT", "TYPE"]
    by_key = {row[0]: row[1:] for row in rows}
    assert by_key[STRATEGY][:2] == ["Error", "Error"]
    assert by_key[OUTBOUND][:2] == ["3", "2"]
    assert set(by_key) == {s["metadata"]["name"] for s in read(server, "/v1/settings")["items"]}


def test_get_one_key_shows_allowed_values_and_description(invoke: Invoke) -> None:
    result = invoke("settings", "get", STRATEGY)

    assert result.exit_code == 0, result.output
    assert "Allowed:     Error, Migration, ForceStop, Stop" in result.stdout
    assert "Description: What maintenance does with running VMs" in result.stdout


def test_get_json_is_the_raw_setting(invoke: Invoke, server: LiveServer) -> None:
    result = invoke("settings", "get", STRATEGY, "-o", "json")

    assert json.loads(result.stdout) == read(server, f"/v1/settings/{STRATEGY}")


def test_reset_deletes_the_override(invoke: Invoke, server: LiveServer, sent: RecordingTransport) -> None:
    invoke("settings", "set", STRATEGY, "Migration")

    result = invoke("settings", "reset", STRATEGY)

    assert result.exit_code == 0, result.output
    assert sent.to("DELETE", f"/v1/settings/{STRATEGY}")
    assert result.stdout.startswith(f"setting {STRATEGY} reset to its default")
    assert server.plane.settings.get_str(STRATEGY) == "Error"
