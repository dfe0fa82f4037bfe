"""Every file of the data directory is private after `serve --demo`, whatever the umask; the admin
token is printed once, when it is made."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.crash.server import ServerProcess
from tests.store.upgrades import store_at
from virtplane.store.store import sqlite_url


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The test's umask, inherited by the server it starts."""
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _modes(data_dir: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(data_dir.stat().st_mode)}
    for path in data_dir.rglob("*"):
        found[str(path.relative_to(data_dir))] = stat.S_IMODE(path.lstat().st_mode)
    return found


@pytest.mark.parametrize("umask", [0o022, 0o000], indirect=True, ids=["umask-022", "umask-000"])
def test_the_data_dir_is_private_and_the_token_printed_once(tmp_path: Path, umask: int) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, demo=True)
    server.log = tmp_path / "server.log"  # the test's own file, not the server's
    server.start()
    try:
        token = server.token
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as admin:
            assert admin.post("/v1/tokens", json={"name": "ci", "role": "viewer"}).status_code == 201
        running = _modes(data)  # while it serves: the WAL and SHM files are there
        assert {"virtplane.db-wal", "virtplane.db-shm"} <= set(running), sorted(running)
        assert {n: oct(m) for n, m in running.items() if m & 0o077} == {}, f"umask {umask:03o}"
    finally:
        server.stop()
    first = server.log.read_text()
    server.start()  # a second start on the same data
    server.stop()

    modes = _modes(data)
    for name in (".", "admin.token", "virtplane.db", "sim.db", "consoles"):
        assert name in modes, sorted(modes)
    assert modes["."] == 0o700 and modes["admin.token"] == 0o600 and modes["virtplane.db"] == 0o600
    exposed = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert exposed == {}, f"open to others with umask {umask:03o}: {exposed}"

    assert first.count(token) == 1, "the new admin token is printed once (the export line)"
    again = server.log.read_text()[len(first) :]
    assert token not in again, again
    assert f"admin token: in {data / 'admin.token'}" in again
    assert f"VIRTPLANE_TOKEN=$(cat {data / 'admin.token'})" in again


@pytest.mark.parametrize("umask", [0o022], indirect=True, ids=["umask-022"])
def test_an_older_release_s_open_files_are_narrowed_and_its_backup_is_private(
    tmp_path: Path, umask: int
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store_at(sqlite_url(data / "virtplane.db"), "0005").close()  # as the release before left it
    assert _modes(data)["."] == 0o755 and _modes(data)["virtplane.db"] == 0o644
    server = ServerProcess(data)
    server.log = tmp_path / "server.log"
    server.start()
    server.stop()
    modes = _modes(data)
    backups = [name for name in modes if name.startswith("backups/")]
    assert backups, sorted(modes)  # the upgrade to 0006 backed the store up first
    exposed = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert exposed == {}, f"open to others after the upgrade: {exposed}"
