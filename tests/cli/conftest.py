from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from virtplane.cli.context import CliOverrides
from virtplane.cli.main import app

from .fake_server import FakeServer

Invoke = Callable[..., Result]


class FakeClock:
    """Time that passes only when the CLI sleeps: waits are deterministic and instant."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.interrupt_after: int | None = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.interrupt_after is not None and len(self.sleeps) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.now += seconds


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def invoke(server: FakeServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """Run ``virtplane ARGS...`` against the fake server; returns Typer's ``Result``."""
    monkeypatch.delenv("VIRTPLANE_URL", raising=False)
    monkeypatch.delenv("VIRTPLANE_TOKEN", raising=False)

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        overrides = CliOverrides(transport=server.transport, clock=clock)
        extra: dict[str, Any] = {"obj": overrides}
        return CliRunner().invoke(app, list(args), input=input, env=env, **extra)

    return run


def vm(name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "VirtualMachine", "metadata": {"name": name}, "spec": spec}


def host(name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Host", "metadata": {"name": name}, "spec": {"uri": f"sim://{name}", **spec}}
