"""A real slapd for the module, and live servers whose logins use it through the operator
guide's ``[identity]`` example (its URL pointed at the test's slapd)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, serving
from tests.identity.slapd import Slapd, start_slapd
from tests.test_readme import blocks
from virtplane.api.routes.login import Logins
from virtplane.identity.config import identity_settings
from virtplane.store.store import Store

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "operator-guide.md"


def guide_identity(url: str, **changes: Any) -> dict[str, Any]:
    """The guide's ``[identity]`` table with ``url`` for its LDAP server and ``changes`` (top level;
    ``ldap`` merged into its table, a None taking its key out)."""
    (block,) = [b for b in blocks(GUIDE.read_text(), "toml") if "[identity.ldap]" in b]
    table: dict[str, Any] = tomllib.loads(block)["identity"]
    table["ldap"]["url"] = url
    for key, value in changes.pop("ldap", {}).items():
        if value is None:
            table["ldap"].pop(key, None)
        else:
            table["ldap"][key] = value
    table.update(changes)
    return table


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    server = start_slapd(tmp_path_factory.mktemp("slapd"))
    yield server
    server.stop()


ServerWith = Callable[..., AbstractContextManager[LiveServer]]


@pytest.fixture
def server_with(store: Store, slapd: Slapd) -> ServerWith:
    """``server_with(**changes)``: a live server whose logins are the guide's, changed so."""

    started: list[str] = []

    @contextmanager
    def start(url: str | None = None, **changes: Any) -> Iterator[LiveServer]:
        settings = identity_settings(guide_identity(url or slapd.url, **changes), "the test")

        def setup(app: Any) -> None:
            app.state.logins = Logins.of(settings)

        started.append(f"test{len(started) or ''}")  # tokens test-admin, then test1-admin, ...
        with serving(store, name=started[-1], setup=setup) as server:
            yield server

    return start


@pytest.fixture
def live(server_with: ServerWith) -> Iterator[LiveServer]:
    with server_with() as server:
        yield server
