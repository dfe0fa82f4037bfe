"""``GET /v1/backup`` on a PostgreSQL store: 409 BackupNotSupported, naming pg_dump and
pg_restore (the server does not run them: docs/decisions.md)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.postgres.pg import schema_url
from virtplane.api.app import create_app
from virtplane.api.context import ApiContext
from virtplane.store.settings import Settings
from virtplane.store.store import Store


@pytest.fixture
def pg_store() -> Iterator[Store]:
    with schema_url() as url:
        store = Store(url)
        store.migrate()
        yield store
        store.close()


async def test_a_postgresql_store_is_refused_with_how_to_back_it_up(pg_store: Store) -> None:
    app = create_app(ApiContext(store=pg_store, settings=Settings(pg_store)))
    token = pg_store.create_token("backup-admin", "admin")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://virtplane"
    ) as client:
        response = await client.get("/v1/backup", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["reason"] == "BackupNotSupported"
    assert "pg_dump" in body["message"] and "pg_restore" in body["message"]
