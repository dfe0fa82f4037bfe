"""Error rendering: the server's reason and message, exit 1; an absent server, never a traceback."""

from __future__ import annotations

import socket

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import LiveServer
from virtplane.cli.client import error_from_response
from virtplane.cli.context import CliOverrides
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.main import app
from virtplane.domain.resources import RunPolicy

from .conftest import Invoke, RecordingTransport, add_host, add_vm, wait_phase


def test_the_servers_reason_and_message_are_printed(invoke: Invoke, server: LiveServer) -> None:
    add_host(server, "node-1")
    add_vm(server, "web-1", RunPolicy.ALWAYS_ON)
    wait_phase(server, "web-1", "Running")

    result = invoke("vm", "restart", "web-1", role="viewer")

    assert result.exit_code == ExitCode.DENIED
    assert result.stderr.startswith("Error (Forbidden): "), result.stderr
    assert "operator" in result.stderr, "it says which role would do"
    assert result.stdout == ""


def test_a_missing_resource_is_reported(invoke: Invoke) -> None:
    result = invoke("get", "vm", "nope")

    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stderr.startswith("Error (NotFound): "), result.stderr
    assert "nope" in result.stderr


def test_an_invalid_value_is_the_servers_explanation(invoke: Invoke) -> None:
    result = invoke("settings", "set", "migration.max_outbound_per_host", "lots")

    assert result.exit_code == 1
    assert result.stderr.startswith("Error (InvalidSetting): "), result.stderr
    assert "migration.max_outbound_per_host" in result.stderr


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (502, "Bad gateway from proxy", ("BadGateway", "Bad gateway from proxy")),
        (503, "", ("ServiceUnavailable", "Service Unavailable")),
        (
            422,
            {"detail": [{"loc": ["body", "spec", "cpu"], "msg": "must be >= 1", "type": "value_error"}]},
            ("UnprocessableEntity", "spec.cpu: must be >= 1"),
        ),
    ],
)
def test_answers_that_are_not_the_servers_own_still_give_a_message(
    status: int, body: object, expected: tuple[str, str]
) -> None:
    """What a proxy in front of the server (or a framework default) may answer: never our shape."""
    response = (
        httpx.Response(status, json=body)
        if isinstance(body, dict)
        else httpx.Response(status, text=str(body))
    )

    error = error_from_response(response)

    assert (error.reason, error.message) == expected


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_connection_refused_says_how_to_start_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIRTPLANE_TOKEN", raising=False)
    url = f"http://127.0.0.1:{_closed_port()}"

    result = CliRunner().invoke(app, ["--url", url, "get", "vms"])

    assert result.exit_code == ExitCode.UNREACHABLE
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert result.stderr.startswith(
        f"Error (ServerUnreachable): the virtplane server is not reachable at {url}"
    )
    assert "virtplane serve --demo" in result.stderr


def test_a_timeout_is_reported_as_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIRTPLANE_URL", raising=False)

    def time_out(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    result = CliRunner().invoke(
        app, ["get", "vms"], obj=CliOverrides(transport=httpx.MockTransport(time_out))
    )

    assert result.exit_code == ExitCode.UNREACHABLE
    assert "not reachable at http://127.0.0.1:8470 (the request timed out)" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["get"],
        ["get", "vms", "-o", "xml"],
        ["vm", "stop"],
        ["restore", "web-1"],
        ["host", "maintenance", "enable", "node-1", "--strategy", "Teleport"],
        ["get", "vm", "web-1", "-l", "app=web"],
        ["sim", "fault", "node-1", "teleport", "--vm", "web-1"],
    ],
)
def test_usage_errors_exit_with_2_and_send_nothing(
    invoke: Invoke, sent: RecordingTransport, args: list[str]
) -> None:
    result = invoke(*args)

    assert result.exit_code == 2, result.output
    assert sent.sent == []
