"""What a command imports before it answers (issue 39: start-up under 0.3 s). No times here
(bench/ row 10 measures whole commands): the modules that made it slow stay unimported by the
commands that do not need them. Each command runs in a fresh interpreter, as a user's does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import LiveServer

PROBE = """
import json, sys
from virtplane.cli.main import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
httpx_cli = sys.modules.get("httpx._main")
print(json.dumps({
    "loaded": sorted(m for m in json.loads(sys.stdin.read()) if m in sys.modules),
    "httpx_cli_loaded": getattr(httpx_cli, "__file__", None) is not None,
}), file=sys.stderr)
"""
# our models (0.36 s), the console's WebSocket client, YAML (only for -o yaml and files),
# rich's progress bars (backup) and live display, the OIDC login's HTTP server, TOML (a file)
NOT_FOR_HELP_OR_GET = [
    "virtplane.domain.resources",
    "virtplane.domain.base",
    "pydantic",  # Typer 0.29 and later put every parameter through it (pyproject pins below)
    "websockets",
    "yaml",
    "rich.progress",
    "rich.live",
    "http.server",
    "tomllib",
]
NOT_FOR_HELP = [*NOT_FOR_HELP_OR_GET, "httpx"]  # --help talks to no server


def loaded(
    args: list[str], env: dict[str, str], unwanted: list[str] = NOT_FOR_HELP_OR_GET
) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        input=json.dumps(unwanted),
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    found: dict[str, object] = json.loads(done.stderr.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(
    "args", [["--help"], ["get", "vms"], ["get", "hosts", "-o", "wide"], ["image", "upload", "--help"]]
)
def test_help_and_get_import_only_what_they_use(server: LiveServer, args: list[str]) -> None:
    env = {"VIRTPLANE_URL": server.url, "VIRTPLANE_TOKEN": server.tokens["viewer"]}
    unwanted = NOT_FOR_HELP if args == ["--help"] else NOT_FOR_HELP_OR_GET
    assert loaded(args, env, unwanted) == {"loaded": [], "httpx_cli_loaded": False}


def test_a_selector_still_checks_the_field_against_the_models(server: LiveServer) -> None:
    """The models load where they are needed: a field selector is checked before it is sent."""
    env = {"VIRTPLANE_URL": server.url, "VIRTPLANE_TOKEN": server.tokens["viewer"]}
    found = loaded(["get", "vms", "--field-selector", "status.phase=Running"], env)
    assert "virtplane.domain.resources" in found["loaded"]  # type: ignore[operator]
