"""The CLI against the real application: a live server over SQLite with simulated hosts.

Every request goes over loopback to the real app (``tests.conftest.serving``), through a
transport that also keeps a copy of it, so a test can say what the CLI sent as well as
what the server made of it. The clock lets the CLI's waits pass quickly: a poll sleeps
a few real milliseconds while the CLI's own time moves by the whole poll interval.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from tests.conftest import LiveServer, eventually_sync, serving
from virtplane.cli.context import CliOverrides
from virtplane.cli.main import app
from virtplane.domain.resources import (
    Capacity,
    Host,
    HostConnection,
    HostSpec,
    Metadata,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
)
from virtplane.drivers.base import domain_name
from virtplane.store.store import Store

Invoke = Callable[..., Result]

REAL_SECONDS_PER_POLL = 0.01


@dataclass
class SentRequest:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any


class RecordingTransport(httpx.HTTPTransport):
    """The real HTTP transport, keeping a copy of every request it sends.

    ``before_send`` runs just before a request leaves: a test uses it to act as a
    concurrent writer at an exact point of the CLI's conversation with the server.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[SentRequest] = []
        self.before_send: Callable[[httpx.Request], None] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = None
        if request.headers.get("content-type") != "application/octet-stream":  # a file is sent as read
            body = json.loads(request.content) if request.content else None
        self.sent.append(
            SentRequest(
                request.method, request.url.path, dict(request.url.params), dict(request.headers), body
            )
        )
        if self.before_send is not None:
            self.before_send(request)
        return super().handle_request(request)

    def to(self, method: str, path: str) -> list[SentRequest]:
        return [r for r in self.sent if r.method == method and r.path == path]


class FastClock:
    """The CLI's clock: each sleep takes a few real milliseconds and moves the CLI's time by the
    whole interval, so ``--timeout`` counts polls; a test may interrupt or act between polls."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.interrupt_after: int | None = None
        self.between_polls: Callable[[int], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.interrupt_after is not None and len(self.sleeps) >= self.interrupt_after:
            raise KeyboardInterrupt
        if self.between_polls is not None:
            self.between_polls(len(self.sleeps))
        time.sleep(REAL_SECONDS_PER_POLL)
        self.now += seconds


@pytest.fixture
def server(store: Store) -> Iterator[LiveServer]:
    with serving(store, name="cli") as live:
        live.plane.settings.set("vm.start.backoff_base_s", 0.05)
        live.plane.settings.set("vm.start.backoff_cap_s", 0.2)
        yield live


@pytest.fixture
def sent() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
def clock() -> FastClock:
    return FastClock()


@pytest.fixture
def invoke(
    server: LiveServer, sent: RecordingTransport, clock: FastClock, monkeypatch: pytest.MonkeyPatch
) -> Invoke:
    """Run ``virtplane ARGS...`` against the live server as ``role``; returns Typer's ``Result``.

    ``role=None`` sends no token; ``env`` replaces the URL and token options entirely.
    """
    monkeypatch.delenv("VIRTPLANE_URL", raising=False)
    monkeypatch.delenv("VIRTPLANE_TOKEN", raising=False)

    def run(
        *args: str, input: str | None = None, env: dict[str, str] | None = None, role: str | None = "admin"
    ) -> Result:
        where: list[str] = []
        if env is None:
            where = ["--url", server.url] + (["--token", server.tokens[role]] if role else [])
        overrides = CliOverrides(transport=sent, clock=clock)
        return CliRunner().invoke(app, [*where, *args], input=input, env=env, obj=overrides)

    return run


# ---------------------------------------------------------------------- seeding the real server


def add_host(server: LiveServer, name: str, vcpus: int = 16, memory_mib: int = 32768, **spec: Any) -> Host:
    host = server.store.create(
        Host(
            metadata=Metadata(name=name),
            spec=HostSpec(uri=f"sim://{name}", capacity=Capacity(vcpus=vcpus, memory_mib=memory_mib), **spec),
        )
    )
    eventually_sync(lambda: server.store.get(Host, name).status.connection is HostConnection.UP)
    return host


def add_vm(
    server: LiveServer, name: str, policy: RunPolicy = RunPolicy.MANUAL, **spec: Any
) -> VirtualMachine:
    return server.store.create(
        VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(run_policy=policy, **spec))
    )


def wait_phase(server: LiveServer, name: str, phase: str) -> VirtualMachine:
    """The VM in ``phase`` with no request left to carry out."""

    def settled() -> VirtualMachine | None:
        vm = server.store.get(VirtualMachine, name)
        pending = [k for k in vm.metadata.annotations if k.startswith("virtplane.io/")]
        return vm if vm.status.phase.value == phase and not pending else None

    found: VirtualMachine = eventually_sync(settled)
    return found


def read(server: LiveServer, path: str) -> Any:
    """What the server says, read directly (not through the CLI)."""
    with server.client() as client:
        return client.get(path).json()


def inject(server: LiveServer, host: str, kind: str, vm: str | None = None, count: int = 1) -> None:
    """A simulator fault, straight into the server's simulator (on its loop)."""
    domain = domain_name(server.store.get(VirtualMachine, vm).metadata.uid) if vm else None
    server.in_loop(server.plane.sim.inject, host, kind, domain, count)
