"""Every exit code the CLI documents (``virtplane --help``, docs/cli.md) is what it returns in
its case, against the live server; and shell completion works in a real bash."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.conftest import LiveServer
from virtplane.cli.exit_codes import ExitCode, exit_code_table
from virtplane.domain.resources import RunPolicy

from .conftest import Invoke, add_host, add_vm, inject, wait_phase

CLOSED_LOOPBACK_URL = "http://127.0.0.1:9"  # the discard port: nothing listens on it here

NO_SCHEME = {"VIRTPLANE_URL": "127.0.0.1:9"}
VM = "apiVersion: virtplane.io/v1\nkind: VirtualMachine\nmetadata: {name: new}\nspec: {run_policy: Manual}\n"

CASES: list[tuple[str, ExitCode, Callable[[Invoke], Result]]] = [
    ("get", ExitCode.OK, lambda invoke: invoke("get", "vms")),
    ("not applicable", ExitCode.FAILED, lambda invoke: invoke("vm", "start", "always")),  # AlwaysOn
    ("unknown option", ExitCode.USAGE, lambda invoke: invoke("get", "vms", "--no-such-option")),
    # without a scheme: the command line is wrong, no server was even asked
    ("url without scheme", ExitCode.USAGE, lambda invoke: invoke("get", "vms", env=NO_SCHEME)),
    (
        "closed port",
        ExitCode.UNREACHABLE,
        lambda invoke: invoke("get", "vms", env={"VIRTPLANE_URL": CLOSED_LOOPBACK_URL}),
    ),
    ("wait", ExitCode.TIMEOUT, lambda invoke: invoke("vm", "start", "manual", "--wait", "--timeout", "2")),
    ("viewer writes", ExitCode.DENIED, lambda invoke: invoke("vm", "stop", "always", role="viewer")),
    ("viewer applies", ExitCode.DENIED, lambda invoke: invoke("apply", "-f", "-", input=VM, role="viewer")),
    ("get missing", ExitCode.NOT_FOUND, lambda invoke: invoke("get", "vm", "no-such-vm")),
    # the API answers an action on a missing VM 422 VMNotFound: the same missing VM to a script
    ("action on missing", ExitCode.NOT_FOUND, lambda invoke: invoke("vm", "stop", "no-such-vm")),
    ("describe missing", ExitCode.NOT_FOUND, lambda invoke: invoke("describe", "vm", "no-such-vm")),
    # a pin for a plain http:// URL: nothing to verify (tests/cli/test_tls.py: a CA or pin mismatch)
    (
        "pin without tls",
        ExitCode.UNTRUSTED,
        lambda invoke: invoke("--tls-fingerprint", "ab" * 32, "get", "vms"),
    ),
]


def test_every_documented_code_has_a_case() -> None:
    assert {code for _, code, _ in CASES} == set(ExitCode)
    assert [line.split()[0] for line in exit_code_table().splitlines()] == [str(c.value) for c in ExitCode]


@pytest.mark.parametrize(("case", "code", "command"), CASES, ids=[case for case, _, _ in CASES])
def test_the_cli_exits_with_the_documented_code(
    invoke: Invoke, server: LiveServer, case: str, code: ExitCode, command: Callable[[Invoke], Result]
) -> None:
    add_host(server, "node-1")
    add_vm(server, "always", RunPolicy.ALWAYS_ON)
    add_vm(server, "manual", RunPolicy.MANUAL)
    wait_phase(server, "manual", "Stopped")
    inject(server, "node-1", "fail-start", "manual", count=1000)  # its start never ends

    result = command(invoke)

    assert result.exit_code == code.value, (case, result.stdout, result.stderr)


def test_a_url_without_scheme_is_reported_as_the_option_s_mistake(invoke: Invoke) -> None:
    result = invoke("--url", "localhost:18471", "get", "vms", env={})

    assert result.exit_code == ExitCode.USAGE
    assert "--url" in result.stderr and "http://" in result.stderr
    assert "ServerUnreachable" not in result.stderr


@pytest.mark.parametrize(
    "command", [["vm", "start"], ["vm", "stop"], ["delete"], ["host", "maintenance", "enable"]]
)
def test_timeout_help_names_the_code_a_timeout_exits_with(invoke: Invoke, command: list[str]) -> None:
    result = invoke(*command, "--help", env={"COLUMNS": "400"})

    timeout_line = next(line for line in result.stdout.splitlines() if "--timeout" in line)
    assert f"exit {ExitCode.TIMEOUT.value}" in timeout_line, timeout_line


def test_help_lists_the_exit_codes(invoke: Invoke) -> None:
    result = invoke("--help")

    assert "Exit codes:" in result.stdout
    assert "--install-completion" in result.stdout


def _complete(words: list[str]) -> list[str]:
    """What bash offers for ``words`` after sourcing ``virtplane --show-completion bash``."""
    script = Path(sys.executable).parent / "virtplane"
    assert script.exists(), "the console script is installed with the package"
    shell = (
        f'source <("{script}" --show-completion bash)\n'
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        f'_virtplane_completion "{script}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def test_bash_completes_commands_kinds_and_choices() -> None:
    assert _complete(["virtplane", "ho"]) == ["host"]
    assert _complete(["virtplane", "describe", "v"]) == ["volumes", "vms"]
    assert _complete(["virtplane", "host", "maintenance", "enable", "n1", "--strategy", "''"]) == [
        "Error",
        "Migration",
        "ForceStop",
        "Stop",
    ]
