"""A fresh PostgreSQL schema per test, on the server named by VIRTPLANE_TEST_PG_URL.

Each test gets its own schema (``search_path`` set through the connection options), so
tests never see each other's rows and can run against one throw-away server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import FULL_RUN

ENV = "VIRTPLANE_TEST_PG_URL"
SKIP_REASON = f'{ENV} is not set: start a server with `eval "$(scripts/postgres.sh start)"`'


def pg_url_or_skip() -> str:
    """The test server's URL; without one the test skips, or fails in a full run (bin/test starts it)."""
    url = os.environ.get(ENV)
    if not url:
        (pytest.fail if FULL_RUN else pytest.skip)(SKIP_REASON)
    return url


@contextmanager
def fresh_schema(base_url: str, *, settings: dict[str, str] | None = None) -> Iterator[str]:
    """Create an empty schema, yield a URL whose connections use it, drop it afterwards.

    ``settings`` are more session settings for those connections (e.g. a time zone).
    """
    schema = f"vp_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        separator = "&" if "?" in base_url else "?"
        options = " ".join(f"-c{k}={v}" for k, v in {"search_path": schema, **(settings or {})}.items())
        yield f"{base_url}{separator}options={quote(options)}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@contextmanager
def schema_url(*, settings: dict[str, str] | None = None) -> Iterator[str]:
    """``fresh_schema`` on the test server, or skip the test when none is configured."""
    with fresh_schema(pg_url_or_skip(), settings=settings) as url:
        yield url
