"""Shared fixtures: a migrated SQLite store, a live server on a free port, an in-loop control plane."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.drivers.sim import SimCloud
from virtplane.server import ApiServer, sim_factory
from virtplane.store.store import Store, sqlite_url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(sqlite_url(tmp_path / "test.db"))
    s.migrate()
    yield s
    s.close()


def make_plane(store: Store, *, boot_seconds: float = 0.02, shutdown_seconds: float = 0.02) -> ControlPlane:
    sim = SimCloud(boot_seconds=boot_seconds, shutdown_seconds=shutdown_seconds)
    ref: list[ControlPlane] = []
    plane = ControlPlane(
        store, sim=sim, driver_factory=sim_factory(ref, sim), options=ControlPlaneOptions(workers=4)
    )
    ref.append(plane)
    return plane


@pytest.fixture
async def plane(store: Store) -> AsyncIterator[ControlPlane]:
    """A running control plane in the test's event loop, on simulated hosts that boot in 20 ms."""
    p = make_plane(store)
    await p.start()
    yield p
    await p.stop()


async def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with its last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


@dataclass
class LiveServer:
    url: str
    tokens: dict[str, str]
    plane: ControlPlane
    store: Store

    def client(self, role: str | None = "admin", **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10.0, **kwargs)


@pytest.fixture
def live_server(store: Store) -> Iterator[LiveServer]:
    """The real app under uvicorn on a free port, in a thread, with tokens for every role."""
    tokens = {role: store.create_token(f"test-{role}", role) for role in ("admin", "operator", "viewer")}
    plane = make_plane(store)
    config = uvicorn.Config(plane.app(), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = ApiServer(config, plane.api_context.streams)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield LiveServer(url=f"http://127.0.0.1:{port}", tokens=tokens, plane=plane, store=store)
    server.should_exit = True
    thread.join(timeout=10)
