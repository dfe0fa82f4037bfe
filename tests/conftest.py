"""Shared fixtures: a migrated SQLite store, a live server on a free port, an in-loop control plane."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.drivers.sim import SimCloud
from virtplane.server import ApiServer, sim_factory
from virtplane.store.sealing import Keyring
from virtplane.store.store import Store, sqlite_url

FULL_RUN = os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1"
"""Set by ``bin/test`` once the system packages are in: a missing part is then a failure, not a skip."""


def libvirt_or_skip() -> Any:
    """The ``libvirt`` module; without libvirt-python the test skips, or fails in a full run."""
    try:
        import libvirt
    except ImportError as exc:
        why = (
            "libvirt-python is not installed (pip install libvirt-python==VERSION of the system "
            f"libvirt, `pkg-config --modversion libvirt`; scripts/qemu/setup.sh does it): {exc}"
        )
        if FULL_RUN:
            pytest.fail(why)
        pytest.skip(why, allow_module_level=True)
    return libvirt


@pytest.fixture
def silent_daemon(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A libvirt daemon that accepts connections and never answers, as a stopped or hung one
    does: a unix socket that is listened on and never read. (Its URI, the listener.)"""
    path = tmp_path / "libvirt-sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    yield f"qemu+unix:///system?socket={path}", listener
    listener.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(sqlite_url(tmp_path / "test.db"), keyring=Keyring.load_or_create(tmp_path / "secrets.key"))
    s.migrate()
    yield s
    s.close()


def make_plane(
    store: Store, *, sim: SimCloud | None = None, boot_seconds: float = 0.02, shutdown_seconds: float = 0.02
) -> ControlPlane:
    """A control plane on simulated hosts whose reconciles are recorded (``tests.reconciles``)."""
    from tests.reconciles import ReconcileLog  # it imports this module

    sim = sim or SimCloud(boot_seconds=boot_seconds, shutdown_seconds=shutdown_seconds)
    log = ReconcileLog()
    plane: ControlPlane
    plane = ControlPlane(
        store,
        sim=sim,
        driver_factory=sim_factory(sim, lambda: plane.cache.hosts()),
        options=ControlPlaneOptions(workers=4, wrap_reconciler=log.wrap),
    )
    log.attach(plane)
    return plane


@pytest.fixture
async def plane(store: Store) -> AsyncIterator[ControlPlane]:
    """A running control plane in the test's event loop, on simulated hosts that boot in 20 ms."""
    p = make_plane(store)
    await p.start()
    yield p
    await p.stop()


class WallClock:
    """A ``now()`` for the controllers (``ctx.now``) or leases that moves only when the test moves it."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


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


def eventually_sync(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """``eventually`` for a test's own thread, while the server runs in another."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


def wait_json(client: httpx.Client, path: str, accept: Callable[[Any], Any], timeout: float = 15.0) -> Any:
    """GET ``path`` until ``accept`` holds for its JSON body; fail with the last body after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(path).json()
        if accept(body):
            return body
        assert time.monotonic() < deadline, f"{path} never got there: {body}"
        time.sleep(0.02)


@dataclass
class LiveServer:
    url: str
    tokens: dict[str, str]
    plane: ControlPlane
    store: Store
    loop: asyncio.AbstractEventLoop

    def client(self, role: str | None = "admin", **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        # a guard against a hang, not a measure: CI's two suites share two cores, and a first
        # request has waited more than 10 s there (tests/web/test_routes.py, once)
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kwargs)

    def in_loop(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` run on the server's event loop (where the simulator must be called)."""

        async def call() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def reconciled(self, name: str, kind: str = "VirtualMachine", timeout: float = 10.0) -> Any:
        """From the test's thread: a reconcile of ``kind/name`` started after this call has
        finished (``tests.reconciles``); returns its outcome."""
        from tests.reconciles import reconciled

        future = asyncio.run_coroutine_threadsafe(reconciled(self.plane, name, kind, timeout), self.loop)
        return future.result(timeout + 5)


@contextmanager
def serving(
    store: Store,
    plane: ControlPlane | None = None,
    name: str = "test",
    setup: Callable[[Any], None] | None = None,
) -> Iterator[LiveServer]:
    """The real app under uvicorn on a free port, in a thread, with tokens for every role;
    ``setup(app)`` first sets what ``serve`` would from its options (``app.state.logins``)."""
    tokens = {role: store.create_token(f"{name}-{role}", role) for role in ("admin", "operator", "viewer")}
    plane = plane or make_plane(store)
    app = plane.app()
    if setup is not None:
        setup(app)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = ApiServer(config, plane.api_context.streams)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the {name} server did not start")
        time.sleep(0.01)
    listener = server.servers[0]
    port = listener.sockets[0].getsockname()[1]
    try:
        yield LiveServer(
            url=f"http://127.0.0.1:{port}", tokens=tokens, plane=plane, store=store, loop=listener.get_loop()
        )
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def live_server(store: Store) -> Iterator[LiveServer]:
    """The real app under uvicorn on a free port, in a thread, with tokens for every role."""
    with serving(store) as server:
        yield server


def seed_console_world(admin: httpx.Client) -> None:
    """One simulated host with web-1 (AlwaysOn, running once this returns) and off-1 (AlwaysOff):
    the consoles' tests attach to the first and are refused the second."""
    host = {"uri": "sim://host-1", "cluster": "c", "capacity": {"vcpus": 8, "memory_mib": 8192}}
    assert admin.post("/v1/hosts", json={"metadata": {"name": "host-1"}, "spec": host}).status_code == 201
    for name, policy in (("web-1", "AlwaysOn"), ("off-1", "AlwaysOff")):
        body = {"metadata": {"name": name}, "spec": {"run_policy": policy, "cpu": 1, "memory_mib": 512}}
        assert admin.post("/v1/vms", json=body).status_code == 201
    wait_json(admin, "/v1/vms/web-1", lambda vm: vm["status"]["phase"] == "Running")
