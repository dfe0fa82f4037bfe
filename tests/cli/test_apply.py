"""``apply -f``: multi-document manifests, create then configure, local checks, partial failures."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer
from virtplane.domain.resources import Host, Setting, VirtualMachine

from .conftest import Invoke, RecordingTransport, SentRequest, wait_phase

FLEET = """\
apiVersion: virtplane.io/v1
kind: Host
metadata:
  name: node-1
spec:
  uri: sim://node-1
  capacity: {vcpus: 8, memory_mib: 16384}
---
apiVersion: virtplane.io/v1
kind: VirtualMachine
metadata:
  name: web-1
  labels: {app: web}
spec:
  cpu: 2
  memory_mib: 1024
"""


def writes(sent: RecordingTransport) -> list[SentRequest]:
    """The PUTs and PATCHes that were real writes, not dry runs."""
    return [r for r in sent.sent if r.method in ("PUT", "PATCH") and "dryRun" not in r.params]


@pytest.fixture
def fleet_file(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    return path


def test_first_apply_creates_every_document(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, fleet_file: Path
) -> None:
    result = invoke("apply", "-f", str(fleet_file))

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["host/node-1 created", "vm/web-1 created"]
    assert sent.to("POST", "/v1/vms")[0].body == {
        "apiVersion": "virtplane.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "web-1", "labels": {"app": "web"}},
        "spec": {"cpu": 2, "memory_mib": 1024},
    }
    host = server.store.get(Host, "node-1")
    assert (host.spec.capacity.vcpus, host.spec.capacity.memory_mib) == (8, 16384)  # type: ignore[union-attr]
    vm = server.store.get(VirtualMachine, "web-1")
    assert (vm.spec.cpu, vm.spec.memory_mib, vm.metadata.labels) == (2, 1024, {"app": "web"})


def test_applying_the_same_file_again_changes_nothing(
    invoke: Invoke, sent: RecordingTransport, fleet_file: Path
) -> None:
    invoke("apply", "-f", str(fleet_file))

    result = invoke("apply", "-f", str(fleet_file))

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["host/node-1 unchanged", "vm/web-1 unchanged"]
    assert not writes(sent), "asked as dry runs only"


def test_a_changed_spec_is_written_with_the_version_read_and_keeps_other_annotations(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, fleet_file: Path
) -> None:
    invoke("apply", "-f", str(fleet_file))
    server.store.mutate(VirtualMachine, "web-1", lambda v: v.metadata.annotations.update(team="blue"))
    fleet_file.write_text(FLEET.replace("cpu: 2", "cpu: 4").replace("{app: web}", "{app: web, tier: front}"))

    result = invoke("apply", "-f", str(fleet_file))

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["host/node-1 unchanged", "vm/web-1 configured"]
    put = writes(sent)[-1].body
    assert isinstance(put["metadata"]["resource_version"], int), "a guarded write"
    assert put["metadata"]["annotations"] == {"team": "blue"}, "what the manifest does not name survives"
    vm = server.store.get(VirtualMachine, "web-1")
    assert (vm.spec.cpu, vm.metadata.labels) == (4, {"app": "web", "tier": "front"})
    assert vm.metadata.annotations["team"] == "blue"


def test_a_stale_write_is_retried_after_reading_again(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, fleet_file: Path
) -> None:
    invoke("apply", "-f", str(fleet_file))
    # the controllers' own writes of web-1 (placing and starting it) done, the race is the test's
    wait_phase(server, "web-1", "Running")
    fleet_file.write_text(FLEET.replace("cpu: 2", "cpu: 3"))

    def someone_else_writes_first(request: httpx.Request) -> None:
        if request.method == "PUT" and len(sent.to("PUT", "/v1/vms/web-1")) == 1:  # the dry run
            server.store.mutate(VirtualMachine, "web-1", lambda v: v.metadata.labels.update(by="other"))

    sent.before_send = someone_else_writes_first
    result = invoke("apply", "-f", str(fleet_file))

    assert result.exit_code == 0, result.output
    assert "vm/web-1 configured" in result.stdout
    assert len(sent.to("PUT", "/v1/vms/web-1")) == 3, "the first dry run lost the race: asked again"
    assert len(writes(sent)) == 1
    assert server.store.get(VirtualMachine, "web-1").spec.cpu == 3


def test_manifests_can_come_from_stdin(invoke: Invoke, server: LiveServer) -> None:
    result = invoke("apply", "-f", "-", input=FLEET)

    assert result.exit_code == 0, result.output
    assert server.store.find(VirtualMachine, "web-1") is not None


@pytest.mark.parametrize(
    ("second_document", "expected_error"),
    [
        (
            "apiVersion: v1\nkind: VirtualMachine\nmetadata: {name: a}",
            "apiVersion is 'v1', expected 'virtplane.io/v1'",
        ),
        ("kind: VirtualMachine\nmetadata: {name: a}", "apiVersion is missing"),
        ("apiVersion: virtplane.io/v1\nkind: vm\nmetadata: {name: a}", "kind 'vm' is not one of"),
        ("apiVersion: virtplane.io/v1\nkind: Pod\nmetadata: {name: a}", "kind 'Pod' is not one of"),
        ("apiVersion: virtplane.io/v1\nkind: VirtualMachine\nmetadata: {}", "metadata.name is missing"),
        ("- just\n- a list", "expected a mapping"),
    ],
)
def test_a_bad_document_is_named_and_nothing_is_sent(
    invoke: Invoke, sent: RecordingTransport, tmp_path: Path, second_document: str, expected_error: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(FLEET.split("---")[0] + "---\n" + second_document + "\n")

    result = invoke("apply", "-f", str(path))

    assert result.exit_code == 1
    assert f"Error (InvalidManifest): {path}:9 (document 2): {expected_error}" in result.stderr
    assert sent.sent == []


def test_a_lower_case_kind_gets_a_suggestion(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text("apiVersion: virtplane.io/v1\nkind: virtualmachine\nmetadata: {name: a}\n")

    result = invoke("apply", "-f", str(path))

    assert "did you mean 'VirtualMachine'?" in result.stderr


def test_a_refused_document_does_not_stop_the_others(
    invoke: Invoke, server: LiveServer, tmp_path: Path
) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(FLEET.replace("cpu: 2", "cpu: 0"))  # the server refuses cpu 0

    result = invoke("apply", "-f", str(path))

    assert result.exit_code == 1
    assert result.stdout.splitlines() == ["host/node-1 created"]
    assert f"Error (Invalid): vm/web-1 in {path}:15 (document 2): spec.cpu" in result.stderr, "cpu's line"
    assert server.store.find(VirtualMachine, "web-1") is None


def test_an_unreadable_file_is_a_clear_error(invoke: Invoke, tmp_path: Path) -> None:
    result = invoke("apply", "-f", str(tmp_path / "missing.yaml"))

    assert result.exit_code == 1
    assert "Error (FileError): cannot read" in result.stderr
    assert "No such file or directory" in result.stderr


def test_invalid_yaml_is_a_clear_error(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: [unclosed\n")

    result = invoke("apply", "-f", str(path))

    assert result.exit_code == 1
    assert (
        f"Error (InvalidManifest): {path} is not valid YAML: line 2, column 1: expected ',' or ']'"
        in result.stderr
    ), "the file's name and the line, not <unicode string>"


def test_a_setting_document_sets_its_value(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, tmp_path: Path
) -> None:
    key = "host.maintenance.local.storage.strategy"
    path = tmp_path / "settings.yaml"
    path.write_text(
        f"apiVersion: virtplane.io/v1\nkind: Setting\nmetadata: {{name: {key}}}\nspec: {{value: Migration}}\n"
    )

    first = invoke("apply", "-f", str(path))
    second = invoke("apply", "-f", str(path))

    assert first.stdout.strip() == f"setting/{key} configured"
    assert second.stdout.strip() == f"setting/{key} unchanged"
    assert [p.body for p in sent.to("PATCH", f"/v1/settings/{key}")] == [{"spec": {"value": "Migration"}}]
    assert server.plane.settings.get_str(key) == "Migration"
    assert server.store.find(Setting, key) is not None
