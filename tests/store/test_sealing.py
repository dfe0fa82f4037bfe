"""Secrets at rest (issue 31, item 6): a copy of the database alone reveals no password; a
plaintext password of an earlier release is sealed at upgrade (and the upgrade stops rather
than leave one without a key); ``virtplane secrets rotate-key`` seals every Secret again
with a new key and drops the old one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import select, text
from typer.testing import CliRunner

from tests.conftest import LiveServer
from virtplane.cli.main import app
from virtplane.domain.base import Metadata
from virtplane.domain.resources import Secret, SecretSpec
from virtplane.runtime.datadir import DataDirLock
from virtplane.store import schema
from virtplane.store.migrations.data import LATEST, data_version
from virtplane.store.migrations.data.d0003_sealed_secrets import KeyNeeded
from virtplane.store.sealing import Keyring, SecretsKeyError
from virtplane.store.store import Store, sqlite_url
from virtplane.store.upgrade import UpgradeFailed

PASSWORD = "BMC-pa55word-in-clear"
NEW_PASSWORD = "another-BMC-pa55word"


def raw_bytes(db: Path) -> bytes:
    """What a copy of the database's files holds (the WAL too, if there is one)."""
    return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())


def test_sqlite_a_copy_of_the_database_alone_reveals_no_password(
    live_server: LiveServer, tmp_path: Path
) -> None:
    secret = {
        "kind": "Secret",
        "metadata": {"name": "bmc"},
        "spec": {"username": "root", "password": PASSWORD},
    }
    with live_server.client("admin") as admin:
        assert admin.post("/v1/secrets", json=secret).status_code == 201
        assert admin.put("/v1/secrets/bmc", json={**secret, "spec": {"username": "root"}}).status_code == 200
        changed = {
            **secret,
            "metadata": {"name": "bmc-2"},
            "spec": {"username": "r", "password": NEW_PASSWORD},
        }
        assert admin.post("/v1/secrets", json=changed).status_code == 201
    files = raw_bytes(tmp_path / "test.db")
    assert b"vp-sealed:v1:" in files, "the sealed form is there"
    for password in (PASSWORD, NEW_PASSWORD):
        assert password.encode() not in files, f"{password} in the database's files"
    store = live_server.store
    assert store.opened(store.get(Secret, "bmc")).spec.password == PASSWORD, "the BMC client's view"
    assert store.opened(store.get(Secret, "bmc-2")).spec.password == NEW_PASSWORD
    mode = stat.S_IMODE(os.stat(tmp_path / "secrets.key").st_mode)
    assert mode == 0o600, oct(mode)


def test_the_store_refuses_a_password_it_has_no_key_for(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "k.db"))
    store.migrate()
    with pytest.raises(SecretsKeyError, match="no secrets key"):
        store.create(Secret(metadata=Metadata(name="s"), spec=SecretSpec(username="u", password=PASSWORD)))
    store.close()
    assert PASSWORD.encode() not in raw_bytes(tmp_path / "k.db")


def old_release_database(path: Path) -> None:
    """A database as an earlier release left it: a Secret with its password in clear, data version 2."""
    store = Store(sqlite_url(path))
    store.migrate()
    body = Secret(
        metadata=Metadata(name="bmc", uid="u-1"), spec=SecretSpec(username="root", password=PASSWORD)
    )
    with store.engine.begin() as connection:
        connection.execute(
            schema.objects.insert().values(
                kind="Secret",
                name="bmc",
                uid="u-1",
                resource_version=0,
                generation=1,
                body=body.model_dump_json(),
            )
        )
        connection.execute(text("UPDATE feed_state SET revision = 2 WHERE name = 'data:version'"))
    store.close()
    assert PASSWORD.encode() in path.read_bytes(), "the starting point: in clear"


def test_an_upgrade_seals_the_passwords_an_earlier_release_stored_in_clear(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    old_release_database(db)
    keyring = Keyring.load_or_create(tmp_path / "secrets.key")

    store = Store(sqlite_url(db), keyring=keyring)
    store.migrate()  # what serve does at start, with its key
    secret = store.get(Secret, "bmc")
    assert store.opened(secret).spec.password == PASSWORD
    with store.engine.connect() as connection:
        assert data_version(connection) == LATEST
        events = connection.execute(select(schema.events.c.reason, schema.events.c.message)).all()
    assert [tuple(e) for e in events] == [
        ("Upgraded", "spec.password sealed with the secrets key (it was stored in clear)")
    ]
    store.close()
    assert PASSWORD.encode() not in raw_bytes(db), "nor in the file's free space (secure_delete)"


def test_an_upgrade_without_a_key_stops_and_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    old_release_database(db)
    store = Store(sqlite_url(db))
    with pytest.raises(UpgradeFailed, match="KeyNeeded: Secret/bmc holds a password in clear") as failed:
        store.migrate()
    assert isinstance(failed.value.__cause__, KeyNeeded)
    with store.engine.connect() as connection:
        assert data_version(connection) == 2, "not marked as done"
    store.close()


def test_rotate_key_seals_every_secret_with_a_new_key_and_drops_the_old(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    key_file = data / "secrets.key"
    old = Keyring.load_or_create(key_file)
    store = Store(sqlite_url(data / "virtplane.db"), keyring=old)
    store.migrate()
    for name, password in (("a", PASSWORD), ("b", NEW_PASSWORD)):
        store.create(Secret(metadata=Metadata(name=name), spec=SecretSpec(username="u", password=password)))
    store.create(Secret(metadata=Metadata(name="c"), spec=SecretSpec(username="u")))
    before = {s.metadata.name: s.spec.password for s in store.list_objects(Secret)}
    store.close()

    result = CliRunner().invoke(app, ["secrets", "rotate-key", "--data-dir", str(data)])

    assert result.exit_code == 0, result.output
    assert f"secrets key rotated: 2 secret(s) sealed with the new key in {key_file}" in result.output
    new = Keyring.load(key_file)
    assert len(new.keys) == 1 and new.keys != old.keys, "only the new key is left"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    store = Store(sqlite_url(data / "virtplane.db"), keyring=new)
    after = {s.metadata.name: s for s in store.list_objects(Secret)}
    assert {n: store.opened(s).spec.password for n, s in after.items()} == {
        "a": PASSWORD,
        "b": NEW_PASSWORD,
        "c": None,
    }
    for name in ("a", "b"):
        assert after[name].spec.password != before[name]
        with pytest.raises(SecretsKeyError, match="sealed with a key that is not"):
            old.open(after[name].spec.password or "")
    store.close()


def test_rotate_key_refuses_while_a_server_holds_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    Keyring.load_or_create(data / "secrets.key")
    Store(sqlite_url(data / "virtplane.db")).migrate()
    key_before = (data / "secrets.key").read_bytes()
    lock = DataDirLock(data)
    lock.acquire()
    try:
        result = CliRunner().invoke(
            app, ["secrets", "rotate-key", "--data-dir", str(data)], env={"COLUMNS": "300"}
        )
    finally:
        lock.release()
    assert result.exit_code == 1, result.output
    assert "stop it first" in " ".join(result.output.replace("│", " ").split())
    assert (data / "secrets.key").read_bytes() == key_before, "nothing changed"
