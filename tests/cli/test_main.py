"""The root command: ``serve`` wiring, ``--version``, help with examples on every command."""

from __future__ import annotations

import copy
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from virtplane import __version__
from virtplane.api.limits import RequestLimits
from virtplane.cli.main import app
from virtplane.http_limits import ConnectionLimits
from virtplane.identity.config import IdentitySettings


@dataclass
class RecordedServeOptions:
    data_dir: Path
    host: str
    port: int
    db_url: str | None
    demo: bool
    log_level: str
    log_format: str = "text"
    sim_boot_seconds: float = 1.5
    sim_shutdown_seconds: float = 0.5
    sim_link_mib_s: float = 1000.0
    lease_s: float = 15.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure_http: bool = False
    secrets_key_file: Path | None = None
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    request_limits: RequestLimits = field(default_factory=RequestLimits)
    identity: IdentitySettings | None = None
    role: str = "all"
    workers: int = 1
    health_port: int = 8471


class RecordedServeRefused(Exception):
    pass


@pytest.fixture
def fake_server_module(monkeypatch: pytest.MonkeyPatch) -> list[RecordedServeOptions]:
    """Stands in for ``virtplane.server``; collects what ``run_server`` was called with."""
    calls: list[RecordedServeOptions] = []
    module = types.ModuleType("virtplane.server")
    module.ServeOptions = RecordedServeOptions  # type: ignore[attr-defined]
    module.run_server = calls.append  # type: ignore[attr-defined]
    module.ServeRefused = RecordedServeRefused  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "virtplane.server", module)
    return calls


def test_serve_defaults(fake_server_module: list[RecordedServeOptions]) -> None:
    result = CliRunner().invoke(app, ["serve"])

    assert result.exit_code == 0, result.output
    assert fake_server_module == [
        RecordedServeOptions(
            data_dir=Path("virtplane-data"),
            host="127.0.0.1",
            port=8470,
            db_url=None,
            demo=False,
            log_level="info",
        )
    ]


def test_serve_passes_every_option(fake_server_module: list[RecordedServeOptions], tmp_path: Path) -> None:
    args = ["serve", "--demo", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--port", "9000"]
    args += ["--db", "postgresql+psycopg://db/virtplane", "--log-level", "DEBUG"]
    args += ["--sim-boot-seconds", "0.1", "--sim-shutdown-seconds", "0.2", "--leader-lease-seconds", "6"]
    args += ["--sim-link-mib-s", "50000"]

    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0, result.output
    assert fake_server_module == [
        RecordedServeOptions(
            data_dir=tmp_path,
            host="0.0.0.0",
            port=9000,
            db_url="postgresql+psycopg://db/virtplane",
            demo=True,
            log_level="debug",
            sim_boot_seconds=0.1,
            sim_shutdown_seconds=0.2,
            sim_link_mib_s=50000.0,
            lease_s=6.0,
        )
    ]


def test_serve_passes_the_role_and_the_workers_from_flags_and_the_config_file(
    fake_server_module: list[RecordedServeOptions], tmp_path: Path
) -> None:
    config = tmp_path / "controllers.toml"
    config.write_text('role = "controllers"\nhealth-port = 9101\n')
    assert CliRunner().invoke(app, ["serve", "--role", "api", "--workers", "3"]).exit_code == 0
    assert CliRunner().invoke(app, ["serve", "--config", str(config)]).exit_code == 0
    refused = CliRunner().invoke(app, ["serve", "--role", "scheduler"])

    assert [(o.role, o.workers, o.health_port) for o in fake_server_module] == [
        ("api", 3, 8471),
        ("controllers", 1, 9101),
    ]
    assert refused.exit_code == 2 and "scheduler" in refused.output


def test_serve_refused_is_an_error_with_exit_status_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real server refuses a data directory another process serves, before anything starts."""
    import logging

    from virtplane.runtime.datadir import DataDirLock

    # serve configures the root logger for the CliRunner's stream, closed afterwards: put it back
    monkeypatch.setattr(logging.getLogger(), "handlers", list(logging.getLogger().handlers))
    monkeypatch.setattr(logging.getLogger(), "level", logging.getLogger().level)
    audit = logging.getLogger("virtplane.audit")
    for attribute in ("handlers", "level", "propagate"):
        monkeypatch.setattr(audit, attribute, copy.copy(getattr(audit, attribute)))
    with DataDirLock(tmp_path):
        result = CliRunner().invoke(app, ["serve", "--data-dir", str(tmp_path), "--port", "1"])
    assert result.exit_code == 1
    assert f"another virtplane (pid {os.getpid()}) is serving {tmp_path}" in result.output


def test_serve_rejects_a_bad_port(fake_server_module: list[RecordedServeOptions]) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", "70000"])

    assert result.exit_code == 2
    assert fake_server_module == []


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])

    assert result.stdout.strip() == f"virtplane {__version__}"


@pytest.mark.parametrize(
    "command",
    [
        ["serve"],
        ["apply"],
        ["get"],
        ["describe"],
        ["delete"],
        ["events"],
        ["restore"],
        ["vm", "stop"],
        ["vm", "migrate"],
        ["snapshot", "create"],
        ["host", "maintenance", "enable"],
        ["host", "disable"],
        ["settings", "set"],
        ["sim", "fault"],
        ["token", "create"],
    ],
)
def test_every_command_has_help_with_examples(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})

    assert result.exit_code == 0, result.output
    assert "Examples:" in result.stdout
    assert f"virtplane {' '.join(command)}" in result.stdout
