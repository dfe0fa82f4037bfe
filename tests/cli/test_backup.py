"""``virtplane backup -o FILE`` end to end against a live server: the file is a private, whole
copy of the store; refusals leave no file behind."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from tests.cli.conftest import Invoke, add_vm
from tests.conftest import LiveServer
from virtplane.cli.exit_codes import ExitCode
from virtplane.store.store import head_revision


def test_backup_writes_a_private_whole_copy(invoke: Invoke, server: LiveServer, tmp_path: Path) -> None:
    add_vm(server, "kept-1")
    target = tmp_path / "virtplane.db"
    result = invoke("backup", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert f"backup written to {target}" in result.output and head_revision() in result.output
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with sqlite3.connect(target) as copy:
        names = {row[0] for row in copy.execute("SELECT name FROM objects WHERE kind = 'VirtualMachine'")}
    copy.close()
    assert "kept-1" in names
    assert not list(tmp_path.glob("*.part"))  # no partial file left


def test_backup_keeps_an_existing_file_unless_forced(invoke: Invoke, tmp_path: Path) -> None:
    target = tmp_path / "virtplane.db"
    target.write_text("yesterday")
    refused = invoke("backup", "-o", str(target))
    assert refused.exit_code == ExitCode.FAILED and "FileExists" in refused.output
    assert target.read_text() == "yesterday"
    assert invoke("backup", "-o", str(target), "--force").exit_code == 0
    assert target.read_bytes().startswith(b"SQLite format 3\x00")


def test_an_operator_gets_denied_and_no_file(invoke: Invoke, tmp_path: Path) -> None:
    target = tmp_path / "virtplane.db"
    result = invoke("backup", "-o", str(target), role="operator")
    assert result.exit_code == ExitCode.DENIED, result.output
    assert "Forbidden" in result.output
    assert not target.exists() and not list(tmp_path.glob("*.part"))


def test_no_server_is_unreachable_and_no_file(invoke: Invoke, tmp_path: Path) -> None:
    target = tmp_path / "virtplane.db"
    result = invoke("backup", "-o", str(target), env={"VIRTPLANE_URL": "http://127.0.0.1:9"})
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert not target.exists() and not list(tmp_path.glob("*.part"))
