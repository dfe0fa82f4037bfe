"""``get``: tables per kind, raw JSON/YAML for scripts, kind aliases, label selectors."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from .conftest import Invoke, host, vm
from .fake_server import FakeServer


@pytest.fixture
def fleet(server: FakeServer) -> FakeServer:
    server.add("hosts", host("node-1", cluster="east", capacity={"vcpus": 16, "memory_mib": 32768}))
    web = server.add("vms", vm("web-1", cpu=2, memory_mib=2048, run_policy="AlwaysOn"))
    web["metadata"]["labels"] = {"app": "web"}
    web["status"].update(phase="Running", host="node-1")
    db = server.add("vms", vm("db-1", memory_mib=512))
    db["metadata"]["labels"] = {"app": "db"}
    db["status"].update(phase="Stopped")
    return server


def _table_rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.strip().splitlines()]


def test_get_vms_prints_a_table_with_one_row_per_vm(invoke: Invoke, fleet: FakeServer) -> None:
    result = invoke("get", "vms")

    assert result.exit_code == 0, result.output
    header, *rows = _table_rows(result.stdout)
    assert header == ["NAME", "PHASE", "HOST", "POLICY", "CPU", "MEMORY", "AGE"]
    assert rows[0][:6] == ["web-1", "Running", "node-1", "AlwaysOn", "2", "2Gi"]
    assert rows[1][:6] == ["db-1", "Stopped", "-", "AlwaysOnUnlessStoppedManually", "1", "512Mi"]


def test_get_hosts_shows_state_capacity_and_allocation(invoke: Invoke, fleet: FakeServer) -> None:
    fleet.resources["hosts"]["node-1"]["status"].update(
        resource_state="Enabled", connection="Up", allocated={"vcpus": 2, "memory_mib": 2048, "vms": 1}
    )

    result = invoke("get", "hosts", "-o", "wide")

    assert result.exit_code == 0, result.output
    header, row = _table_rows(result.stdout)
    assert header[:8] == ["NAME", "STATE", "CONNECTION", "CLUSTER", "VMS", "CPU", "MEM", "URI"]
    assert row[:8] == ["node-1", "Enabled", "Up", "east", "1", "2/16", "2Gi/32Gi", "sim://node-1"]


def test_json_output_is_exactly_what_the_server_sent(invoke: Invoke, fleet: FakeServer) -> None:
    listed = invoke("get", "vms", "-o", "json")
    single = invoke("get", "vm", "web-1", "-o", "json")

    assert json.loads(listed.stdout) == {"items": list(fleet.resources["vms"].values())}
    assert json.loads(single.stdout) == fleet.resources["vms"]["web-1"]


def test_yaml_output_parses_back_to_the_resource(invoke: Invoke, fleet: FakeServer) -> None:
    result = invoke("get", "vm", "db-1", "-o", "yaml")

    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == fleet.resources["vms"]["db-1"]


@pytest.mark.parametrize("spelling", ["vm", "VMs", "VirtualMachine", "virtualmachines"])
def test_kind_is_accepted_in_any_usual_spelling(invoke: Invoke, fleet: FakeServer, spelling: str) -> None:
    result = invoke("get", spelling, "-o", "json")

    assert result.exit_code == 0, result.output
    assert fleet.requests[-1].path == "/v1/vms"


@pytest.mark.parametrize(
    ("spelling", "path"),
    [
        ("pool", "/v1/storagepools"),
        ("vol", "/v1/volumes"),
        ("snap", "/v1/snapshots"),
        ("op", "/v1/operations"),
    ],
)
def test_short_aliases_reach_their_plural_path(
    invoke: Invoke, server: FakeServer, spelling: str, path: str
) -> None:
    result = invoke("get", spelling)

    assert result.exit_code == 0, result.output
    assert server.requests[-1].path == path
    assert "No " in result.stdout


def test_an_unknown_kind_is_an_error_that_lists_the_kinds(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("get", "containers")

    assert result.exit_code == 1
    assert "Error (UnknownKind): unknown kind 'containers'" in result.stderr
    assert "vms" in result.stderr
    assert server.requests == []


def test_selectors_are_sent_to_the_server_in_one_query(invoke: Invoke, fleet: FakeServer) -> None:
    result = invoke(
        "get", "vms", "-l", "app=web", "-l", "tier notin (db)", "--field-selector", "status.host=h1"
    )

    assert result.exit_code == 0, result.output
    assert fleet.requests[-1].params == {
        "limit": "500",
        "labelSelector": "app=web,tier notin (db)",
        "fieldSelector": "status.host=h1",
    }


def test_a_malformed_selector_is_a_usage_error_that_says_where(invoke: Invoke, server: FakeServer) -> None:
    bad_labels = invoke("get", "vms", "-l", "app in (web")
    bad_fields = invoke("get", "vms", "--field-selector", "spec.vm=x")

    def flat(text: str) -> str:  # the message as one line, out of Rich's box
        return " ".join(text.replace("\u2502", " ").split())

    assert bad_labels.exit_code == 2
    assert "'app in (web': at position 11: expected ',' or ')'" in flat(bad_labels.stderr)
    assert bad_fields.exit_code == 2
    assert "cannot select by field 'spec.vm'" in flat(bad_fields.stderr)
    assert server.requests == []


def test_get_events_lists_the_audit_trail(invoke: Invoke, server: FakeServer) -> None:
    server.events.append(
        {"id": 1, "time": None, "kind": "VirtualMachine", "name": "web-1", "type": "Warning",
         "reason": "StartFailed", "message": "domain died during boot"}
    )  # fmt: skip

    result = invoke("get", "events")

    assert result.exit_code == 0, result.output
    assert "StartFailed" in result.stdout
    assert "VirtualMachine/web-1" in result.stdout
    assert "domain died during boot" in result.stdout


def test_url_and_token_come_from_options(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("--url", "http://cp.example:9000", "--token", "s3cret", "get", "vms")

    assert result.exit_code == 0, result.output
    request = server.requests[-1]
    assert request.headers["authorization"] == "Bearer s3cret"
    assert request.headers["host"] == "cp.example:9000"


def test_url_and_token_come_from_the_environment(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("get", "vms", env={"VIRTPLANE_URL": "http://other:1234", "VIRTPLANE_TOKEN": "envtok"})

    assert result.exit_code == 0, result.output
    assert server.requests[-1].headers["authorization"] == "Bearer envtok"
    assert server.requests[-1].headers["host"] == "other:1234"


def test_no_token_sends_no_authorization_header(invoke: Invoke, server: FakeServer) -> None:
    invoke("get", "vms")

    assert "authorization" not in server.requests[-1].headers


def test_describe_shows_the_resource_its_conditions_and_events(invoke: Invoke, fleet: FakeServer) -> None:
    fleet.resources["vms"]["db-1"]["status"]["conditions"] = [
        {"type": "Maintenance", "status": "True", "reason": "Restore", "message": "restoring from snap-1"}
    ]
    fleet.events.append(
        {"id": 7, "time": None, "kind": "VirtualMachine", "name": "db-1", "type": "Normal",
         "reason": "Stopped", "message": "stopped for restore"}
    )  # fmt: skip

    result = invoke("describe", "vm", "db-1")

    assert result.exit_code == 0, result.output
    assert "name: db-1" in result.stdout
    assert "memory_mib: 512" in result.stdout
    assert "Maintenance  True    Restore  restoring from snap-1" in result.stdout
    assert "stopped for restore" in result.stdout
    events_request = fleet.requests_to("GET", "/v1/events")[-1]
    assert events_request.params == {"kind": "VirtualMachine", "name": "db-1", "limit": "20"}


def test_delete_wait_polls_until_the_resource_is_gone(invoke: Invoke, fleet: FakeServer) -> None:
    result = invoke("delete", "vm", "db-1", "--wait")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["vm/db-1 deletion requested", "vm/db-1 deleted"]
    assert fleet.requests_to("DELETE", "/v1/vms/db-1")
    assert "db-1" not in fleet.resources["vms"]


def test_delete_of_a_resource_with_finalizers_says_deletion_requested(
    invoke: Invoke, fleet: FakeServer
) -> None:
    fleet.overrides[("DELETE", "/v1/vms/web-1")] = httpx.Response(
        200,
        json={"reason": "DeletionRequested", "message": "will be deleted once its resources are released"},
    )

    result = invoke("delete", "vm", "web-1")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "vm/web-1 deletion requested"


def test_piped_tables_have_no_trailing_padding(invoke: Invoke, fleet: FakeServer) -> None:
    result = invoke("get", "vms", "-o", "wide")

    assert result.exit_code == 0, result.output
    assert all(line == line.rstrip() for line in result.stdout.splitlines())
