"""Every store test runs twice: on SQLite (the embedded default) and on PostgreSQL.

The PostgreSQL variant needs VIRTPLANE_TEST_PG_URL (``scripts/postgres.sh start``) and
skips with that reason when it is unset (a failure in a full run); each test gets a fresh schema of its own.
Tests named ``test_sqlite_*`` are about SQLite itself and run only there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres.pg import schema_url
from virtplane.store.sealing import Keyring
from virtplane.store.store import Store, sqlite_url


@pytest.fixture(
    params=[
        pytest.param("sqlite"),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    keyring = Keyring.load_or_create(tmp_path / "secrets.key")
    if request.param == "sqlite":
        s = Store(sqlite_url(tmp_path / "test.db"), keyring=keyring)
        s.migrate()
        yield s
        s.close()
        return
    if request.node.name.startswith("test_sqlite_"):
        pytest.skip("a test of SQLite itself")
    with schema_url() as url:
        s = Store(url, keyring=keyring)
        s.migrate()
        try:
            yield s
        finally:
            s.close()
