"""``get``: tables per kind, raw JSON/YAML for scripts, kind aliases, label selectors."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from tests.conftest import LiveServer, eventually_sync
from virtplane.cli.exit_codes import ExitCode
from virtplane.domain.resources import Host, RunPolicy, VirtualMachine

from .conftest import Invoke, RecordingTransport, add_host, add_vm, read, wait_phase


@pytest.fixture
def fleet(server: LiveServer) -> LiveServer:
    """node-1 (cluster east) runs web-1 (AlwaysOn, app=web); db-1 (Manual, app=db) has never run."""
    add_host(server, "node-1", cluster="east")
    add_vm(server, "web-1", RunPolicy.ALWAYS_ON, cpu=2, memory_mib=2048)
    server.store.mutate(VirtualMachine, "web-1", lambda v: v.metadata.labels.update(app="web"))
    add_vm(server, "db-1", memory_mib=512)
    server.store.mutate(VirtualMachine, "db-1", lambda v: v.metadata.labels.update(app="db"))
    wait_phase(server, "web-1", "Running")
    wait_phase(server, "db-1", "Stopped")
    eventually_sync(lambda: server.store.get(Host, "node-1").status.allocated.vms == 1)
    server.reconciled("web-1")  # its last writes are in: the fleet stands still from here
    return server


def _table_rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.strip().splitlines()]


def test_get_vms_prints_a_table_with_one_row_per_vm(invoke: Invoke, fleet: LiveServer) -> None:
    result = invoke("get", "vms")

    assert result.exit_code == 0, result.output
    header, *rows = _table_rows(result.stdout)
    assert header == ["NAME", "PHASE", "HOST", "POLICY", "CPU", "MEMORY", "AGE"]
    assert sorted(row[:6] for row in rows) == [
        ["db-1", "Stopped", "-", "Manual", "1", "512Mi"],
        ["web-1", "Running", "node-1", "AlwaysOn", "2", "2Gi"],
    ]


def test_get_hosts_shows_state_capacity_and_allocation(invoke: Invoke, fleet: LiveServer) -> None:
    result = invoke("get", "hosts", "-o", "wide")

    assert result.exit_code == 0, result.output
    header, row = _table_rows(result.stdout)
    assert header[:8] == ["NAME", "STATE", "CONNECTION", "CLUSTER", "VMS", "CPU", "MEM", "URI"]
    # allocated / allocatable: 16 cores x the default vCPU allocation ratio 4.0; memory 1.0
    assert row[:8] == ["node-1", "Enabled", "Up", "east", "1", "2/64", "2Gi/32Gi", "sim://node-1"]


def test_json_output_is_exactly_what_the_server_sent(invoke: Invoke, fleet: LiveServer) -> None:
    listed = invoke("get", "vms", "-o", "json")
    single = invoke("get", "vm", "web-1", "-o", "json")

    # a list is every page's items joined (the pages' metadata is the CLI's business)
    assert json.loads(listed.stdout) == {"items": read(fleet, "/v1/vms")["items"]}
    assert json.loads(single.stdout) == read(fleet, "/v1/vms/web-1")


def test_yaml_output_parses_back_to_the_resource(invoke: Invoke, fleet: LiveServer) -> None:
    result = invoke("get", "vm", "db-1", "-o", "yaml")

    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == read(fleet, "/v1/vms/db-1")


@pytest.mark.parametrize("spelling", ["vm", "VMs", "VirtualMachine", "virtualmachines"])
def test_kind_is_accepted_in_any_usual_spelling(
    invoke: Invoke, fleet: LiveServer, sent: RecordingTransport, spelling: str
) -> None:
    result = invoke("get", spelling, "-o", "json")

    assert result.exit_code == 0, result.output
    assert sent.sent[-1].path == "/v1/vms"
    assert {v["metadata"]["name"] for v in json.loads(result.stdout)["items"]} == {"web-1", "db-1"}


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
    invoke: Invoke, sent: RecordingTransport, spelling: str, path: str
) -> None:
    result = invoke("get", spelling)

    assert result.exit_code == 0, result.output
    assert sent.sent[-1].path == path
    assert "No " in result.stdout


def test_an_unknown_kind_is_an_error_that_lists_the_kinds(invoke: Invoke, sent: RecordingTransport) -> None:
    result = invoke("get", "containers")

    assert result.exit_code == 1
    assert "Error (UnknownKind): unknown kind 'containers'" in result.stderr
    assert "vms" in result.stderr
    assert sent.sent == []


def test_selectors_are_sent_to_the_server_in_one_query(
    invoke: Invoke, fleet: LiveServer, sent: RecordingTransport
) -> None:
    equal = invoke(
        "get",
        "vms",
        "-l",
        "app=web",
        "-l",
        "tier notin (db)",
        "--field-selector",
        "status.host=node-1",
        "-o",
        "json",
    )
    not_equal = invoke("get", "vms", "-l", "app!=web", "-o", "json")
    missing = invoke("get", "vms", "-l", "!app", "-o", "json")

    assert equal.exit_code == 0, equal.output
    assert sent.sent[0].params == {
        "limit": "500",
        "labelSelector": "app=web,tier notin (db)",
        "fieldSelector": "status.host=node-1",
    }
    assert [v["metadata"]["name"] for v in json.loads(equal.stdout)["items"]] == ["web-1"]
    assert [v["metadata"]["name"] for v in json.loads(not_equal.stdout)["items"]] == ["db-1"]
    assert json.loads(missing.stdout)["items"] == []


def test_a_malformed_selector_is_a_usage_error_that_says_where(
    invoke: Invoke, sent: RecordingTransport
) -> None:
    bad_labels = invoke("get", "vms", "-l", "app in (web")
    bad_fields = invoke("get", "vms", "--field-selector", "spec.vm=x")

    def flat(text: str) -> str:  # the message as one line, out of Rich's box
        return " ".join(text.replace("\u2502", " ").split())

    assert bad_labels.exit_code == 2
    assert "'app in (web': at position 11: expected ',' or ')'" in flat(bad_labels.stderr)
    assert bad_fields.exit_code == 2
    assert "cannot select by field 'spec.vm'" in flat(bad_fields.stderr)
    assert sent.sent == []


def test_get_events_lists_the_audit_trail(invoke: Invoke, fleet: LiveServer) -> None:
    result = invoke("get", "events")

    assert result.exit_code == 0, result.output
    assert "VirtualMachine/web-1" in result.stdout
    started = [line for line in result.stdout.splitlines() if "Started" in line and "web-1" in line]
    assert started and "start issued on node-1" in started[-1]


def test_url_and_token_come_from_options(invoke: Invoke, fleet: LiveServer, sent: RecordingTransport) -> None:
    result = invoke("--url", fleet.url, "--token", fleet.tokens["viewer"], "get", "vms", env={})

    assert result.exit_code == 0, result.output
    assert sent.sent[-1].headers["authorization"] == f"Bearer {fleet.tokens['viewer']}"
    assert sent.sent[-1].headers["host"] == fleet.url.removeprefix("http://")


def test_url_and_token_come_from_the_environment(
    invoke: Invoke, fleet: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("get", "vms", env={"VIRTPLANE_URL": fleet.url, "VIRTPLANE_TOKEN": fleet.tokens["viewer"]})

    assert result.exit_code == 0, result.output
    assert sent.sent[-1].headers["authorization"] == f"Bearer {fleet.tokens['viewer']}"
    assert "web-1" in result.stdout


def test_no_token_sends_no_authorization_header_and_the_server_says_so(
    invoke: Invoke, sent: RecordingTransport
) -> None:
    result = invoke("get", "vms", role=None)

    assert "authorization" not in sent.sent[-1].headers
    assert result.exit_code == ExitCode.DENIED
    assert result.stderr.startswith("Error (Unauthorized): "), result.stderr


def test_describe_shows_the_resource_its_conditions_and_events(
    invoke: Invoke, fleet: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("describe", "vm", "web-1")

    assert result.exit_code == 0, result.output
    assert "name: web-1" in result.stdout
    assert "memory_mib: 2048" in result.stdout
    ready = [line.split() for line in result.stdout.splitlines() if line.startswith("Ready ")]
    assert ready and ready[0][:2] == ["Ready", "True"], result.stdout
    assert "start issued on node-1" in result.stdout
    assert sent.to("GET", "/v1/events")[-1].params == {
        "kind": "VirtualMachine",
        "name": "web-1",
        "limit": "20",
    }


def _section(stdout: str, title: str) -> list[list[str]]:
    """The rows of a describe section: the lines after ``title:`` up to the blank line."""
    rows = stdout.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0]
    return _table_rows(rows)


def test_describe_vm_lists_its_operations_newest_last_and_only_its_own(
    invoke: Invoke, fleet: LiveServer, sent: RecordingTransport
) -> None:
    assert invoke("vm", "start", "db-1", "--wait").exit_code == 0
    assert invoke("vm", "restart", "web-1", "--wait").exit_code == 0
    assert invoke("vm", "stop", "db-1", "--wait").exit_code == 0

    result = invoke("describe", "vm", "db-1")

    assert result.exit_code == 0, result.output
    header, *rows = _section(result.stdout, "Operations")
    assert header == ["NAME", "TYPE", "PHASE", "STEP", "AGE", "MESSAGE"]
    assert [row[1:3] for row in rows] == [["Start", "Completed"], ["Stop", "Completed"]], result.stdout
    assert all(row[0].startswith("db-1-") for row in rows), "not web-1's restart"
    assert sent.to("GET", "/v1/operations")[-1].params["fieldSelector"] == "spec.vm=db-1"
    assert (
        result.stdout.index("Conditions:")
        < result.stdout.index("Operations:")
        < result.stdout.index("Events:")
    )


def test_describe_host_lists_the_vms_it_runs_and_its_maintenance(invoke: Invoke, fleet: LiveServer) -> None:
    quiet = invoke("describe", "host", "node-1")
    assert invoke("host", "maintenance", "enable", "node-1", "--strategy", "Error").exit_code == 0

    draining = invoke("describe", "host", "node-1")

    assert quiet.exit_code == 0, quiet.output
    assert _section(quiet.stdout, "VMs") == [
        ["NAME", "PHASE", "POLICY", "CPU", "MEMORY"],
        ["web-1", "Running", "AlwaysOn", "2", "2Gi"],
    ], "db-1 has never run: it is on no host"
    assert "Maintenance of host/node-1" not in quiet.stdout
    assert draining.exit_code == 0, draining.output
    assert "Maintenance of host/node-1: " in draining.stdout


def test_describe_still_shows_the_vm_when_a_part_is_refused(
    invoke: Invoke, fleet: LiveServer, sent: RecordingTransport
) -> None:
    def refuse_operations(request: httpx.Request) -> None:
        if request.url.path == "/v1/operations":
            request.url = request.url.copy_with(path="/v1/no-such-list")

    sent.before_send = refuse_operations
    result = invoke("describe", "vm", "web-1")

    assert result.exit_code == 0, result.output
    assert "(operations unavailable: NotFound: " in result.stderr, result.stderr
    assert "name: web-1" in result.stdout and "Events:" in result.stdout
    assert "Operations:" not in result.stdout


def test_delete_wait_polls_until_the_resource_is_gone(invoke: Invoke, fleet: LiveServer) -> None:
    result = invoke("delete", "vm", "web-1", "--wait")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["vm/web-1 deletion requested", "vm/web-1: deleted"]
    assert fleet.store.find(VirtualMachine, "web-1") is None


def test_delete_of_a_resource_with_finalizers_says_deletion_requested(
    invoke: Invoke, fleet: LiveServer
) -> None:
    result = invoke("delete", "vm", "db-1")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "vm/db-1 deletion requested"


def test_piped_tables_have_no_trailing_padding(invoke: Invoke, fleet: LiveServer) -> None:
    result = invoke("get", "vms", "-o", "wide")

    assert result.exit_code == 0, result.output
    assert all(line == line.rstrip() for line in result.stdout.splitlines())


def test_get_networks_shows_kind_subnet_and_addresses(invoke: Invoke, server: LiveServer) -> None:
    from virtplane.domain.networks import Network

    server.store.create(
        Network.model_validate(
            {
                "metadata": {"name": "lan"},
                "spec": {
                    "kind": "bridge",
                    "bridge": "br0",
                    "vlan": 7,
                    "cluster": "east",
                    "subnet": "10.4.0.0/29",
                },
            }
        )
    )
    eventually_sync(lambda: server.store.get(Network, "lan").status.addresses_free == 6)
    result = invoke("get", "nets")

    assert result.exit_code == 0, result.output
    header, *rows = _table_rows(result.stdout)
    assert header == ["NAME", "KIND", "BRIDGE", "VLAN", "SUBNET", "SCOPE", "HOSTS", "IN-USE", "FREE", "AGE"]
    assert [row[:9] for row in rows] == [["lan", "bridge", "br0", "7", "10.4.0.0/29", "east", "0", "0", "6"]]
