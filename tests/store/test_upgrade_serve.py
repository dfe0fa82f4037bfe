"""What an operator sees of an upgrade: ``virtplane serve`` on stored data (issue 30)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.crash.server import ServerProcess, free_port
from tests.store.upgrades import contents, forget_fingerprints, old_vm, set_body, store_at, unreadable_vm
from virtplane.domain.resources import Metadata, Secret
from virtplane.domain.resources.secret import SecretSpec
from virtplane.store.sealing import Keyring
from virtplane.store.store import Store, sqlite_url
from virtplane.store.upgrade import head_revision

ROOT = Path(__file__).parents[2]


def test_serve_quarantines_an_unreadable_object_and_serves_the_rest(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = Store(sqlite_url(data / "virtplane.db"), keyring=Keyring.load_or_create(data / "secrets.key"))
    store.migrate()
    unreadable_vm(store)
    store.create(Secret(metadata=Metadata(name="bmc"), spec=SecretSpec(username="root", password="hunter2")))
    set_body(store, "Secret", "bmc", lambda body: body["spec"].update(username=["root"]))
    store.close()
    server = ServerProcess(data)
    server.start()
    try:
        log = server.log.read_text()
        lines = [line for line in log.splitlines() if "quarantined" in line]
        assert len(lines) == 2 and all(" WARNING virtplane.store.upgrade: " in line for line in lines)
        assert any(
            "quarantined VirtualMachine bad: spec.cpu: Input should be a valid integer" in x for x in lines
        )
        assert any("quarantined Secret bmc: spec.username: " in line for line in lines)
        assert "hunter2" not in log
        with server.client() as admin:
            assert [vm["metadata"]["name"] for vm in admin.get("/v1/vms").json()["items"]] == ["good"]
            listed = admin.get("/v1/quarantine")
            assert "hunter2" not in listed.text, "a Secret's password is never returned"
            secret, item = listed.json()["items"]
            assert secret["body"]["metadata"]["name"] == "bmc" and "withheld" in secret["body"]
            assert (item["kind"], item["name"], item["body"]["spec"]["cpu"]) == (
                "VirtualMachine",
                "bad",
                "lots",
            )
            assert item["reason"].startswith("spec.cpu: ")
            viewer = admin.post("/v1/tokens", json={"name": "v", "role": "viewer"}).json()["token"]
            refused = admin.get("/v1/quarantine", headers={"Authorization": f"Bearer {viewer}"})
            assert (refused.status_code, refused.json()["reason"]) == (403, "Forbidden")
            (deleted,) = admin.delete("/v1/quarantine/VirtualMachine/bad").json()["items"]
            assert deleted["name"] == "bad"
            again = admin.delete("/v1/quarantine/VirtualMachine/bad")
            assert (again.status_code, again.json()["reason"]) == (404, "NotFound")
            assert admin.delete("/v1/quarantine/no%20kind/x").status_code == 422
            assert [i["name"] for i in admin.get("/v1/quarantine").json()["items"]] == ["bmc"]
            spec = {"run_policy": "AlwaysOff", "nics": []}
            assert admin.post("/v1/vms", json={"metadata": {"name": "bad"}, "spec": spec}).status_code == 201
    finally:
        server.stop()


def test_serve_refuses_data_from_a_newer_release_in_one_line_touching_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    database = data / "virtplane.db"
    store = Store(sqlite_url(database))
    store.migrate()
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0999'")
    store.close()
    before = database.read_bytes()

    served = subprocess.run(
        [
            sys.executable,
            "-m",
            "virtplane.cli.main",
            "serve",
            "--data-dir",
            str(data),
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert served.returncode == 1
    (line,) = served.stderr.splitlines()
    assert line.startswith("Error (NewerData): the store's schema is at revision 0999, which release ")
    assert "start that release, or restore the backup" in line
    assert database.read_bytes() == before
    assert not (data / "backups").exists() and not (data / "admin.token").exists()
    assert not (data / "secrets.key").exists(), "no key made for a store this release refuses"


def test_the_version_is_pyprojects_in_the_cli_and_healthz(tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run(
        [sys.executable, "-m", "virtplane.cli.main", "--version"], capture_output=True, text=True, check=True
    )
    assert shown.stdout == f"virtplane {version}\n"
    server = ServerProcess(tmp_path / "data")
    server.start()
    try:
        with server.client() as client:
            assert client.get("/healthz").json()["version"] == version
    finally:
        server.stop()
    store = Store(sqlite_url(tmp_path / "data" / "virtplane.db"))
    with store.engine.connect() as connection:
        recorded = connection.exec_driver_sql("SELECT value FROM store_meta WHERE key = 'release'").scalar()
    store.close()
    assert recorded == version, "the release that last upgraded the store is recorded in it"


def test_a_server_killed_in_the_middle_of_its_upgrade_leaves_the_old_store(tmp_path: Path) -> None:
    """SIGKILL with everything upgraded and backed up but not committed: the old store, whole."""
    data = tmp_path / "data"
    data.mkdir()
    store = store_at(sqlite_url(data / "virtplane.db"), "0004")
    old_vm(store, "a")
    forget_fingerprints(store)
    before = contents(store)
    store.close()
    server = ServerProcess(data)

    server.start(crash_at="upgrade.before-commit", wait=False)
    assert server.wait_killed() == -9

    reopened = Store(sqlite_url(data / "virtplane.db"))
    assert contents(reopened) == before, "what the old release finds: its own store"
    reopened.close()
    server.start()
    try:
        with server.client() as admin:
            assert admin.get("/v1/vms/a").json()["spec"]["cpu"] == 1
    finally:
        server.stop()
    upgraded = Store(sqlite_url(data / "virtplane.db"))
    assert upgraded.schema_revision() == head_revision()
    upgraded.close()
