"""``virtplane store-restore FILE --data-dir DIR``: a backup put in place as a stopped server's
store; refused while a server holds the directory, and for a file that is not a whole store."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.main import app
from virtplane.domain.resources import Metadata, RunPolicy, VirtualMachine, VirtualMachineSpec
from virtplane.runtime.datadir import DataDirLock
from virtplane.store.backup import sqlite_backup
from virtplane.store.store import Store, sqlite_url


def _store_with(path: Path, *names: str) -> Store:
    store = Store(sqlite_url(path))
    store.migrate()
    for name in names:
        spec = VirtualMachineSpec(run_policy=RunPolicy.MANUAL)
        store.create(VirtualMachine(metadata=Metadata(name=name), spec=spec))
    return store


def _vm_names(path: Path) -> set[str]:
    store = Store(sqlite_url(path))
    try:
        return {vm.metadata.name for vm in store.list_objects(VirtualMachine)}
    finally:
        store.close()


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """A backup of a store that has VM yesterday-1."""
    source = _store_with(tmp_path / "source.db", "yesterday-1")
    sqlite_backup(tmp_path / "source.db", tmp_path / "backup.db")
    source.close()
    return tmp_path / "backup.db"


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A stopped server's data directory whose store has VM today-1, with its WAL still beside it
    (the store is open in this process, as a server killed mid-write leaves it)."""
    directory = tmp_path / "data"
    directory.mkdir()
    current = _store_with(directory / "virtplane.db", "today-1")
    assert (directory / "virtplane.db-wal").exists()
    yield directory
    current.close()


def _restore(backup: Path, data_dir: Path) -> Result:
    return CliRunner().invoke(app, ["store-restore", str(backup), "--data-dir", str(data_dir)])


def test_the_backup_becomes_the_store_and_the_replaced_one_is_kept(backup: Path, data_dir: Path) -> None:
    result = _restore(backup, data_dir)
    assert result.exit_code == 0, result.output
    assert "virtplane serve --data-dir" in result.output
    assert _vm_names(data_dir / "virtplane.db") == {"yesterday-1"}
    assert stat.S_IMODE((data_dir / "virtplane.db").stat().st_mode) == 0o600
    [kept] = data_dir.glob("virtplane.db.replaced-*[0-9Z]")
    assert _vm_names(kept) == {"today-1"}  # with its WAL, moved along: nothing of it is lost


def test_refused_while_a_server_holds_the_directory(backup: Path, data_dir: Path) -> None:
    with DataDirLock(data_dir):
        result = _restore(backup, data_dir)
    assert result.exit_code == ExitCode.FAILED and "DataDirBusy" in result.output, result.output
    assert _vm_names(data_dir / "virtplane.db") == {"today-1"}
    assert not list(data_dir.glob("virtplane.db.replaced-*"))


def test_a_file_that_is_no_store_is_refused(tmp_path: Path, data_dir: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    result = _restore(junk, data_dir)
    assert result.exit_code == ExitCode.FAILED and "InvalidBackup" in result.output, result.output
    assert _vm_names(data_dir / "virtplane.db") == {"today-1"}
