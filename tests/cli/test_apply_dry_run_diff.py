"""``apply`` says ``unchanged`` when the server already holds what the manifest says (the fields
it fills included), ``apply --dry-run`` writes nothing, ``diff`` shows what apply would change."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import LiveServer
from virtplane.domain.resources import VirtualMachine

from .conftest import Invoke, RecordingTransport

NETWORK = """\
apiVersion: virtplane.io/v1
kind: Network
metadata: {name: lan}
spec: {kind: bridge, bridge: br0, cluster: default, subnet: 10.7.0.0/24}
"""
VM = """\
apiVersion: virtplane.io/v1
kind: VirtualMachine
metadata:
  name: web-1
spec:
  run_policy: Manual
  cpu: 2
  nics: [{network: lan}]
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(NETWORK + "---\n" + VM)
    return path


def _real_writes(sent: RecordingTransport) -> list[str]:
    return [f"{r.method} {r.path}" for r in sent.sent if r.method != "GET" and "dryRun" not in r.params]


def test_applying_a_vm_with_nics_twice_is_unchanged_the_second_time(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, fleet: Path
) -> None:
    assert invoke("apply", "-f", str(fleet)).exit_code == 0
    stored = server.store.get(VirtualMachine, "web-1")
    assert stored.spec.nics[0].mac and stored.spec.nics[0].ip, "the server filled them in"
    sent.sent.clear()

    again = invoke("apply", "-f", str(fleet))

    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines() == ["network/lan unchanged", "vm/web-1 unchanged"]
    assert _real_writes(sent) == ["POST /v1/networks", "POST /v1/vms"], "only the creates, refused"
    after = server.store.get(VirtualMachine, "web-1")  # (its status moves on: the controllers')
    assert (after.metadata.generation, after.spec) == (stored.metadata.generation, stored.spec)


def test_dry_run_writes_nothing_and_says_what_it_would_do(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, fleet: Path
) -> None:
    invoke("apply", "-f", str(fleet))
    before = server.store.get(VirtualMachine, "web-1").metadata.generation
    fleet.write_text(
        NETWORK + "---\n" + VM.replace("cpu: 2", "cpu: 4") + "---\n" + VM.replace("web-1", "web-2")
    )
    sent.sent.clear()

    result = invoke("apply", "-f", str(fleet), "--dry-run")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "network/lan unchanged (server dry run)",
        "vm/web-1 configured (server dry run)",
        "vm/web-2 created (server dry run)",
    ]
    assert server.store.find(VirtualMachine, "web-2") is None
    vm = server.store.get(VirtualMachine, "web-1")
    assert (vm.spec.cpu, vm.metadata.generation) == (2, before)
    assert [r for r in sent.sent if r.method != "GET" and r.params.get("dryRun") != "true"] == []


def test_dry_run_reports_what_admission_refuses(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, tmp_path: Path
) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text(VM)  # its network does not exist

    result = invoke("apply", "-f", str(path), "--dry-run")

    assert result.exit_code == 1
    assert f"Error (NetworkNotFound): vm/web-1 in {path}:1 (document 1): spec.nics[0]" in result.stderr
    assert sent.sent and sent.sent[0].params == {"dryRun": "true"}, "admission ran in the server"
    assert server.store.find(VirtualMachine, "web-1") is None


def test_diff_exits_0_without_differences_and_1_with_them(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, fleet: Path
) -> None:
    fleet.write_text(NETWORK)
    missing = invoke("diff", "-f", str(fleet))
    fleet.write_text(NETWORK + "---\n" + VM)
    invoke("apply", "-f", str(fleet))
    same = invoke("diff", "-f", str(fleet))
    fleet.write_text(NETWORK + "---\n" + VM.replace("cpu: 2", "cpu: 4"))
    changed = invoke("diff", "-f", str(fleet))

    assert missing.exit_code == 1, missing.output
    assert missing.stdout.startswith(f"--- /dev/null\n+++ network/lan ({fleet}:1 (document 1))\n")
    assert "+kind: Network\n" in missing.stdout and "+  subnet: 10.7.0.0/24\n" in missing.stdout
    assert (same.exit_code, same.stdout) == (0, ""), "the MAC and address the server filled are no difference"
    assert changed.exit_code == 1, changed.output
    assert "--- vm/web-1 (server)\n" in changed.stdout
    assert "-  cpu: 2\n+  cpu: 4\n" in changed.stdout
    assert "network/lan" not in changed.stdout
    assert server.store.get(VirtualMachine, "web-1").spec.cpu == 2
    assert _real_writes(sent) == ["POST /v1/networks", "POST /v1/vms"], "apply's; diff wrote nothing"


def test_diff_names_a_refused_document(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text(VM.replace("cpu: 2", "cpu: 0"))

    result = invoke("diff", "-f", str(path))

    assert result.exit_code == 1
    assert f"Error (Invalid): vm/web-1 in {path}:7 (document 1): spec.cpu" in result.stderr, "cpu's line"
    assert result.stdout == ""


def test_a_settings_dry_run_checks_the_value_and_writes_nothing(
    invoke: Invoke, sent: RecordingTransport, tmp_path: Path
) -> None:
    key = "host.maintenance.local.storage.strategy"
    path = tmp_path / "setting.yaml"
    document = "apiVersion: virtplane.io/v1\nkind: Setting\nmetadata: {name: %s}\nspec: {value: %s}\n"

    path.write_text(document % (key, "Migration"))
    allowed = invoke("apply", "-f", str(path), "--dry-run")
    path.write_text(document % (key, "Teleport"))
    refused = invoke("apply", "-f", str(path), "--dry-run")

    assert allowed.stdout == f"setting/{key} configured (server dry run)\n", allowed.output
    assert refused.exit_code == 1
    assert "Error (InvalidSetting): " in refused.stderr and "'Teleport' is not allowed" in refused.stderr
    assert _real_writes(sent) == []
