"""``GET /v1/backup`` over a live server: a consistent, current copy of the store while it is
being written, for admins only. (A PostgreSQL store: tests/postgres/test_backup_postgres.py.)"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer
from virtplane.store.store import Store, head_revision

LAN = {
    "kind": "Network",
    "metadata": {"name": "lan"},
    "spec": {"kind": "bridge", "bridge": "br0", "cluster": "c1", "subnet": "10.1.0.0/16"},
}


def _vm(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"run_policy": "Manual", "nics": [{"network": "lan"}]}}


class Writer:
    """Creates VMs, each with an address and a MAC claimed in its own write, until stopped; keeps
    the names the server acknowledged."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.acknowledged: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        index = 0
        while not self.stop.is_set():
            name = f"w-{index}"
            response = self.client.post("/v1/vms", json=_vm(name))
            assert response.status_code == 201, response.text
            self.acknowledged.append(name)
            index += 1


@pytest.fixture
def writing(live_server: LiveServer) -> Iterator[Writer]:
    with live_server.client("admin") as admin, live_server.client("operator") as operator:
        assert admin.post("/v1/networks", json=LAN).status_code == 201
        writer = Writer(operator)
        writer.thread.start()
        try:
            yield writer
        finally:
            writer.stop.set()
            writer.thread.join(10)


def _download(client: httpx.Client, target: Path) -> httpx.Response:
    with client.stream("GET", "/v1/backup") as response, target.open("wb") as out:
        for chunk in response.iter_bytes():
            out.write(chunk)
    return response


def _check_copy(path: Path, before: list[str]) -> int:
    """The copy is a whole, current store: it opens, its pages are sound, every VM acknowledged
    before the request is in it, and each VM in it holds exactly its NIC's address and MAC."""
    with sqlite3.connect(path) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT version_num FROM alembic_version").fetchone() == (head_revision(),)
        vms = dict(copy.execute("SELECT name, uid FROM objects WHERE kind = 'VirtualMachine'").fetchall())
        claims: dict[str, list[str]] = {}
        for scope, owner in copy.execute("SELECT scope, owner_uid FROM claims"):
            claims.setdefault(owner, []).append(scope.split(":")[0])
        revision = copy.execute("SELECT max(revision) FROM changes").fetchone()[0]
        newest = copy.execute("SELECT max(resource_version) FROM objects").fetchone()[0]
    copy.close()
    assert set(before) <= set(vms), sorted(set(before) - set(vms))[:5]
    assert {uid: len(held) for uid, held in claims.items()} == {uid: 2 for uid in vms.values()}
    assert newest <= revision
    return len(vms)


def test_a_backup_taken_during_writes_is_consistent_and_current(
    live_server: LiveServer, writing: Writer, tmp_path: Path
) -> None:
    sizes = []
    with live_server.client("admin") as admin:
        for attempt in range(3):
            while len(writing.acknowledged) < 20 * (attempt + 1):  # writes land between copies
                writing.stop.wait(0.01)
            before = list(writing.acknowledged)
            target = tmp_path / f"copy-{attempt}.db"
            response = _download(admin, target)
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/vnd.sqlite3"
            assert int(response.headers["content-length"]) == target.stat().st_size
            assert "attachment" in response.headers["content-disposition"]
            sizes.append(_check_copy(target, before))
    assert sizes == sorted(sizes) and sizes[0] >= 20
    # nothing of the copies is left beside the live database
    leftovers = [p.name for p in Path(live_server.store.url.removeprefix("sqlite:///")).parent.iterdir()]
    assert not [name for name in leftovers if name.startswith(".backup-")], leftovers


def test_the_copy_opens_as_a_store(live_server: LiveServer, tmp_path: Path) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/networks", json=LAN).status_code == 201
        assert admin.post("/v1/vms", json=_vm("kept")).status_code == 201
        _download(admin, tmp_path / "copy.db")
    restored = Store(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        restored.migrate()
        assert restored.schema_revision() == head_revision()
        assert restored.token_role(live_server.tokens["admin"]) is not None
    finally:
        restored.close()


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_may_copy_the_store(live_server: LiveServer, role: str) -> None:
    with live_server.client(role) as client:
        response = client.get("/v1/backup")
    assert response.status_code == 403
    assert response.json()["reason"] == "Forbidden" and "admin" in response.json()["message"]
    with live_server.client(None) as anonymous:
        assert anonymous.get("/v1/backup").status_code == 401
