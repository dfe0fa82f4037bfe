"""``get``'s formats for scripts: ``-o name``, ``jsonpath=``, ``custom-columns=``, ``--sort-by``,
``--no-headers``, for every kind, against the live server."""

from __future__ import annotations

import pytest

from tests.conftest import LiveServer
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.kinds import KINDS
from virtplane.domain.resources import VirtualMachine

from .conftest import Invoke, add_vm


@pytest.fixture
def vms(server: LiveServer) -> None:
    # by name, by cpu as numbers and by cpu as text: three different orders
    add_vm(server, "web-b", cpu=2)
    server.store.mutate(VirtualMachine, "web-b", lambda vm: vm.metadata.labels.update(app="web"))
    add_vm(server, "web-a", cpu=4)
    add_vm(server, "db", cpu=10)


@pytest.mark.usefixtures("vms")
def test_name_prints_kind_slash_name_per_line(invoke: Invoke) -> None:
    result = invoke("get", "vms", "-o", "name")

    assert result.exit_code == 0, result.output
    assert sorted(result.stdout.splitlines()) == ["vm/db", "vm/web-a", "vm/web-b"]


@pytest.mark.parametrize("info", KINDS, ids=lambda info: info.plural)
def test_every_kind_lists_its_names(invoke: Invoke, server: LiveServer, info: object) -> None:
    add_vm(server, "web-a")
    plural = info.plural  # type: ignore[attr-defined]

    result = invoke("get", plural, "-o", "name")

    assert result.exit_code == 0, result.output
    assert all(line.startswith(f"{info.short}/") for line in result.stdout.splitlines())  # type: ignore[attr-defined]
    if plural in ("vms", "settings"):
        assert result.stdout, "something to list"


def test_events_have_names_too(invoke: Invoke) -> None:
    manifest = (
        "apiVersion: virtplane.io/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {run_policy: Manual}\n"
    )
    invoke("apply", "-f", "-", input=manifest)  # an event: created by admin

    result = invoke("get", "events", "-o", "name", "--limit", "3")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() and all(
        line.startswith("event/") for line in result.stdout.splitlines()
    )


@pytest.mark.usefixtures("vms")
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["vm", "web-a", "-o", "jsonpath={.spec.cpu}"], "4\n"),
        (["vm", "web-a", "-o", "jsonpath=.metadata.name"], "web-a\n"),
        (["vms", "-o", "jsonpath={.items[*].metadata.name}", "--sort-by=.metadata.name"], "db web-a web-b\n"),
        (
            ["vm", "web-b", "-o", 'jsonpath={.metadata.name}{"\\t"}{.metadata.labels.app}{"\\n"}'],
            "web-b\tweb\n",
        ),
        (
            ["vms", "-o", "jsonpath={.items[?(@.spec.cpu > 3)].metadata.name}", "--sort-by=.spec.cpu"],
            "web-a db\n",
        ),
        (["vm", "db", "-o", "jsonpath={.metadata.labels}"], "{}\n"),
    ],
    ids=["scalar", "bare-path", "list", "template", "filter", "object"],
)
def test_jsonpath(invoke: Invoke, args: list[str], expected: str) -> None:
    result = invoke("get", *args)

    assert result.exit_code == 0, result.output
    assert result.stdout == expected


@pytest.mark.usefixtures("vms")
def test_custom_columns_sorted_with_and_without_headers(invoke: Invoke) -> None:
    columns = "custom-columns=NAME:.metadata.name,CPU:.spec.cpu,APP:.metadata.labels.app"

    with_headers = invoke("get", "vms", "-o", columns, "--sort-by", ".spec.cpu")
    without = invoke("get", "vms", "-o", columns, "--sort-by", ".spec.cpu", "--no-headers")

    assert with_headers.exit_code == 0, with_headers.output
    rows = [line.split() for line in with_headers.stdout.splitlines()]
    assert rows == [["NAME", "CPU", "APP"], ["web-b", "2", "web"], ["web-a", "4", "-"], ["db", "10", "-"]]
    assert [line.split() for line in without.stdout.splitlines()] == rows[1:]


@pytest.mark.usefixtures("vms")
def test_sort_by_orders_numbers_as_numbers_and_tables_drop_their_header(invoke: Invoke) -> None:
    result = invoke("get", "vms", "--sort-by=.spec.cpu", "--no-headers")

    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["web-b", "web-a", "db"]


@pytest.mark.parametrize(
    "args",
    [
        ["-o", "bogus"],
        ["-o", "jsonpath="],
        ["-o", "jsonpath={.items["],
        ["-o", "custom-columns=NAME"],
        ["-o", "name=x"],
        ["--sort-by", ".items["],
        ["-o", "name", "-w"],
    ],
    ids=[
        "unknown",
        "empty-template",
        "bad-path",
        "column-without-path",
        "name-with-template",
        "bad-sort",
        "watch",
    ],
)
def test_a_wrong_format_is_a_usage_error(invoke: Invoke, args: list[str]) -> None:
    result = invoke("get", "vms", *args)

    assert result.exit_code == ExitCode.USAGE, result.output
    assert "Traceback" not in result.output
