"""``virtplane explain KIND[.field.path]``: from the models' JSON schema, with no server."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from virtplane.cli.kinds import KINDS
from virtplane.cli.main import app
from virtplane.domain.resources import RunPolicy, VirtualMachineSpec

# a port nothing listens on: explain must not need a server
OFFLINE = ["--url", "http://127.0.0.1:9"]


def explain(path: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*OFFLINE, "explain", path], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_a_list_field_shows_its_type_and_its_items_fields() -> None:
    code, out = explain("vm.spec.nics")
    assert code == 0, out
    assert "KIND:     VirtualMachine" in out
    assert "FIELD:    spec.nics <list of Nic>" in out
    assert "    network <string> (required)" in out
    assert "    mac <string>" in out and "derived from the VM's uid" in out
    assert "    ip <string>" in out
    assert "ALLOWED:  at most 16 items" in out


def test_a_number_shows_its_range() -> None:
    code, out = explain("vm.spec")
    assert code == 0, out
    assert "(default 512; allowed 16 .. 4194304)" in out


def test_an_enum_field_shows_its_default_and_allowed_values() -> None:
    code, out = explain("virtualmachine.spec.run_policy")
    assert code == 0, out
    assert 'DEFAULT:  "AlwaysOnUnlessStoppedManually"' in out
    assert f"ALLOWED:  {', '.join(p.value for p in RunPolicy)}" in out


def test_a_kind_lists_its_spec_fields_as_the_model_has_them() -> None:
    code, out = explain("vm.spec")
    assert code == 0, out
    listed = [line.split()[0] for line in out.split("FIELDS:\n", 1)[1].splitlines() if line[4] != " "]
    assert listed == list(VirtualMachineSpec.model_fields)


@pytest.mark.parametrize("kind", [k.kind for k in KINDS])
def test_every_kind_is_explained(kind: str) -> None:
    code, out = explain(kind)
    assert code == 0, out
    assert f"KIND:     {kind}" in out and "    metadata <Metadata> (required)" in out


def test_an_unknown_field_names_the_fields_there() -> None:
    code, out = explain("vm.spec.memory")
    assert code != 0
    assert "Error (UnknownField): VirtualMachine has no field spec.memory" in out
    assert "memory_mib" in out
