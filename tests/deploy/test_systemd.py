"""deploy/systemd: the server's, the PostgreSQL replica's and the split roles' units (the API
processes, the controllers) pass ``systemd-analyze verify``, and the configuration each one
starts with (deploy/config, installed in /etc/virtplane) is one ``serve --config`` accepts, for
the role the unit is named after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli.test_main import RecordedServeOptions, fake_server_module  # noqa: F401 (a fixture)
from tests.deploy.tools import DEPLOY, tool_or_skip
from virtplane.cli.main import app
from virtplane.tls import is_loopback

UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
INSTALLED_VENV = "/opt/virtplane/venv"
"""Where README's set-up installs virtplane; the test puts this environment there instead."""
OWN_FILES = 1024
"""Descriptors the server needs beside its clients' connections: database, libvirt, consoles."""


def config_of(unit: Path) -> str:
    """The file name in /etc/virtplane that the unit's ExecStart passes to --config."""
    [start] = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    prefix = f"ExecStart={INSTALLED_VENV}/bin/virtplane serve --config /etc/virtplane/"
    assert start.startswith(prefix), start
    return start.removeprefix(prefix)


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = tool_or_skip("systemd-analyze", "systemd")
    assert [u.name for u in UNITS] == [
        "virtplane-api.service",
        "virtplane-controllers.service",
        "virtplane-replica.service",
        "virtplane.service",
    ]
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED_VENV, sys.prefix))
    checked = subprocess.run(
        [analyze, "verify", *(u.name for u in UNITS)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # it warns about unknown keys and other mistakes without failing: any word about ours is one
    complaints = [line for line in (checked.stdout + checked.stderr).splitlines() if "virtplane" in line]
    assert checked.returncode == 0 and not complaints, checked.stdout + checked.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_the_configuration_each_unit_starts_with_is_accepted_by_serve(
    unit: Path,
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
) -> None:
    config = DEPLOY / "config" / config_of(unit)
    result = CliRunner().invoke(app, ["serve", "--config", str(config)])

    assert result.exit_code == 0, result.output
    [options] = fake_server_module
    assert str(options.data_dir) == f"/var/lib/{unit.stem}", "the unit's StateDirectory"
    assert f"StateDirectory={unit.stem}\n" in unit.read_text()
    if unit.stem != "virtplane":
        assert options.db_url is not None and options.db_url.startswith("postgresql+psycopg://")
    else:
        assert options.db_url is None, "SQLite in the data directory"
    if not is_loopback(options.host):  # serve refuses plain HTTP there (tests/cli/test_tls.py)
        assert (options.tls_cert, options.tls_key) == (
            Path("/etc/virtplane/tls/cert.pem"),
            Path("/etc/virtplane/tls/key.pem"),
        ), "HTTPS on the network, as the file's comment says how to make the pair"
        assert not options.insecure_http
    if options.role != "controllers":  # it serves no TLS: /healthz and /metrics on loopback
        assert "ExecReload=/bin/kill -HUP $MAINPID" in unit.read_text(), "systemctl reload: a renewed cert"


ROLES = {
    "virtplane.service": "all",
    "virtplane-replica.service": "all",
    "virtplane-api.service": "api",
    "virtplane-controllers.service": "controllers",
}


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_runs_the_role_it_is_named_after(
    unit: Path,
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
) -> None:
    result = CliRunner().invoke(app, ["serve", "--config", str(DEPLOY / "config" / config_of(unit))])
    assert result.exit_code == 0, result.output
    [options] = fake_server_module
    assert options.role == ROLES[unit.name]
    if options.role == "api":
        assert options.workers > 1, "API processes: the point of the API's own unit"
        assert "ExecReload=" in unit.read_text()
    if options.role == "controllers":
        assert options.workers == 1 and is_loopback(options.host), "no public listener"
        assert "ExecReload=" not in unit.read_text(), "nothing to reload: no certificate"
    if options.role != "all":  # the API seals Secrets' passwords, the controllers open them
        assert options.secrets_key_file == Path("/etc/virtplane/secrets.key")


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_has_open_files_for_its_connection_limit(
    unit: Path,
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
) -> None:
    """systemd's default of 1,024 open files would run out before serve's connection limit
    refuses anyone: idle clients would take every descriptor (issue 31, slowloris)."""
    result = CliRunner().invoke(app, ["serve", "--config", str(DEPLOY / "config" / config_of(unit))])
    assert result.exit_code == 0, result.output
    [options] = fake_server_module
    limits = [line for line in unit.read_text().splitlines() if line.startswith("LimitNOFILE=")]
    assert limits, f"{unit.name} has no LimitNOFILE="
    open_files = int(limits[0].removeprefix("LimitNOFILE="))
    assert open_files >= options.connection_limits.max_connections + OWN_FILES
