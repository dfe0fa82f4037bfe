"""``settings set|get|reset --cluster/--host`` against the real application (a live server)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner, Result

from tests.conftest import LiveServer
from virtplane.cli.main import app

KEY = "host.cpu_allocation_ratio"


def cli(live_server: LiveServer, *args: str) -> Result:
    return CliRunner().invoke(app, ["--url", live_server.url, "--token", live_server.tokens["admin"], *args])


def test_overrides_per_cluster_and_host(live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIRTPLANE_URL", raising=False)
    monkeypatch.delenv("VIRTPLANE_TOKEN", raising=False)
    result = cli(live_server, "settings", "set", KEY, "8", "--cluster", "batch")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"setting {KEY} for cluster batch = 8.0"
    assert cli(live_server, "settings", "set", KEY, "1.5", "--host", "h1").exit_code == 0

    shown = cli(live_server, "settings", "get", KEY).stdout
    assert "Value:       4.0" in shown and "Scope:       host" in shown
    assert "Clusters:    batch=8.0" in shown and "Hosts:       h1=1.5" in shown

    result = cli(live_server, "settings", "reset", KEY, "--host", "h1")
    assert (
        result.exit_code == 0
        and result.stdout.strip() == f"setting {KEY}: the override for host h1 is removed"
    )
    assert live_server.plane.settings.describe(KEY).spec.hosts == {}

    refused = cli(live_server, "settings", "set", "migration.max_attempts", "5", "--cluster", "batch")
    assert refused.exit_code != 0 and "global setting" in refused.output
    both = cli(live_server, "settings", "set", KEY, "2", "--cluster", "batch", "--host", "h1")
    assert both.exit_code != 0 and "not both" in both.output
