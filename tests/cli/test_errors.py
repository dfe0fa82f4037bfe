"""Error rendering: the server's reason and message, exit 1; an absent server, never a traceback."""

from __future__ import annotations

import socket

import httpx
import pytest
from typer.testing import CliRunner

from virtplane.cli.context import CliOverrides
from virtplane.cli.main import app

from .conftest import Invoke, vm
from .fake_server import FakeServer, error


def test_a_json_error_is_printed_as_reason_and_message(invoke: Invoke, server: FakeServer) -> None:
    server.overrides[("GET", "/v1/vms")] = error(403, "Forbidden", "role viewer may not list vms")

    result = invoke("get", "vms")

    assert result.exit_code == 1
    assert result.stderr.strip() == "Error (Forbidden): role viewer may not list vms"
    assert result.stdout == ""


def test_a_missing_resource_is_reported(invoke: Invoke) -> None:
    result = invoke("get", "vm", "nope")

    assert result.exit_code == 1
    assert result.stderr.strip() == "Error (NotFound): vms/nope not found"


def test_fastapi_validation_details_are_readable(invoke: Invoke, server: FakeServer) -> None:
    server.add("vms", vm("web-1"))
    server.overrides[("DELETE", "/v1/vms/web-1")] = httpx.Response(
        422, json={"detail": [{"loc": ["body", "spec", "cpu"], "msg": "must be >= 1", "type": "value_error"}]}
    )

    result = invoke("delete", "vm", "web-1")

    assert result.exit_code == 1
    assert result.stderr.strip() == "Error (UnprocessableEntity): spec.cpu: must be >= 1"


def test_a_non_json_server_error_still_gives_a_message(invoke: Invoke, server: FakeServer) -> None:
    server.overrides[("GET", "/v1/hosts")] = httpx.Response(502, text="Bad gateway from proxy")

    result = invoke("get", "hosts")

    assert result.exit_code == 1
    assert result.stderr.strip() == "Error (BadGateway): Bad gateway from proxy"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_connection_refused_says_how_to_start_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIRTPLANE_TOKEN", raising=False)
    url = f"http://127.0.0.1:{_closed_port()}"

    result = CliRunner().invoke(app, ["--url", url, "get", "vms"])

    assert result.exit_code == 1
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

    assert result.exit_code == 1
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
    ],
)
def test_usage_errors_exit_with_2_and_send_nothing(
    invoke: Invoke, server: FakeServer, args: list[str]
) -> None:
    result = invoke(*args)

    assert result.exit_code == 2, result.output
    assert server.requests == []
