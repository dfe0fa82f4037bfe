"""A manifest's mistakes are named by file, line and field, with the likely right name."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LiveServer
from virtplane.cli.exit_codes import ExitCode
from virtplane.domain.resources import VirtualMachine

from .conftest import Invoke

VM = """\
apiVersion: virtplane.io/v1
kind: VirtualMachine
metadata: {name: web-1}
spec:
  cpu: 2
  memory_gb: 4
"""


def test_an_unknown_field_is_named_at_its_line_with_the_one_meant(
    invoke: Invoke, server: LiveServer, tmp_path: Path
) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text("# a comment first\n" + VM)  # the line of memory_gb: 7

    result = invoke("apply", "-f", str(path))

    assert result.exit_code == ExitCode.FAILED
    assert (
        f"Error (Invalid): vm/web-1 in {path}:7 (document 1): spec.memory_gb: unknown field; did you mean memory_mib?"
        in result.stderr
    ), result.stderr
    assert "Extra inputs" not in result.stderr
    assert server.store.find(VirtualMachine, "web-1") is None


def test_an_unknown_field_deeper_down_and_one_like_no_other(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text(VM.replace("memory_gb: 4", "nics: [{netwrok: lan}]\n  colour: blue"))

    result = invoke("apply", "-f", str(path), "--dry-run")

    assert f"vm/web-1 in {path}:6 (document 1): " in result.stderr, "the first field's line"

    assert "spec.nics.0.netwrok: unknown field; did you mean network?" in result.stderr, result.stderr
    assert (
        "spec.colour: unknown field; the fields here are run_policy, cpu, cpu_mode, memory_mib,"
        in result.stderr
    )


def test_memory_with_a_unit_is_no_mistake(invoke: Invoke, server: LiveServer, tmp_path: Path) -> None:
    path = tmp_path / "vm.yaml"
    path.write_text(VM.replace("memory_gb: 4", "memory: 4Gi"))  # issue 39's manifest

    result = invoke("apply", "-f", str(path))

    assert result.exit_code == ExitCode.OK, result.stderr
    stored = server.store.find(VirtualMachine, "web-1")
    assert stored is not None and stored.spec.memory_mib == 4096


def test_broken_yaml_names_the_file_and_the_line(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(VM + "---\napiVersion: virtplane.io/v1\nkind: Host\nmetadata: {name: a\n")

    result = invoke("apply", "-f", str(path))

    assert result.exit_code == ExitCode.FAILED
    assert result.stderr.startswith(f"Error (InvalidManifest): {path} is not valid YAML: line 11, column 1:")
    assert "<unicode string>" not in result.stderr
