"""``get -w``, ``events --follow`` and ``vm stop -l ... --wait``: the real CLI process against the live server.

The CLI runs as a subprocess (as a user runs it) and is stopped with Ctrl-C (SIGINT);
its output is read line by line as it comes, so each test waits for what it expects and
fails on a deadline rather than sleeping.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from bench.server import py_spy

from tests.conftest import LiveServer
from virtplane.cli.client import ApiClient
from virtplane.cli.errors import WatchExpired


def _stacks(pid: int) -> str:
    """Where a stuck process is (py-spy, which the bench also uses), for the failure's message."""
    spy = py_spy()
    if spy is None:
        return "(py-spy not installed)"
    dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
    return dump.stdout + dump.stderr


class Cli:
    """A running ``virtplane`` command whose output lines are collected as they are printed."""

    def __init__(self, server: LiveServer, role: str, *args: str) -> None:
        env = {**os.environ, "VIRTPLANE_URL": server.url, "VIRTPLANE_TOKEN": server.tokens[role]}
        env.update(PYTHONUNBUFFERED="1", COLUMNS="200")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "virtplane.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            # Ctrl-C as at a terminal: a suite run in the background (bin/test's `&`) has SIGINT
            # ignored, and a child would inherit that and never hear it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._errors: list[str] = []  # read as it comes too: a full pipe would block the command
        assert self.process.stdout is not None and self.process.stderr is not None
        threading.Thread(target=self._pump, args=(self.process.stdout,), daemon=True).start()
        self._error_pump = threading.Thread(
            target=self._errors.extend, args=(self.process.stderr,), daemon=True
        )
        self._error_pump.start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, wanted: Callable[[str], bool], what: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"{what}: not printed; output so far: {self.lines}") from None
            if line is None:
                raise AssertionError(f"{what}: the command ended first; output: {self.lines} {self.stderr()}")
            self.lines.append(line)
            if wanted(line):
                return line

    def finish(self, timeout: float = 60) -> tuple[int, list[str]]:
        """Wait for the command to end by itself: its exit status and every line it printed."""
        status = self.process.wait(timeout=timeout)
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.lines.append(line)
        return status, self.lines

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            where = _stacks(self.process.pid)
            self.process.kill()
            self.process.wait(timeout=10)
            raise AssertionError(
                f"the command did not end on Ctrl-C; its stacks: {where}\nstderr: {self.stderr()[-3000:]}\n"
                f"last output: {self.lines[-10:]}"
            ) from None

    def stderr(self) -> str:
        """What the command wrote to stderr: all of it once it has ended."""
        if self.process.poll() is not None:
            self._error_pump.join(timeout=10)
        return "".join(self._errors)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def clis() -> Iterator[Callable[..., Cli]]:
    started: list[Cli] = []

    def start(server: LiveServer, role: str, *args: str) -> Cli:
        started.append(Cli(server, role, *args))
        return started[-1]

    yield start
    for cli in started:
        cli.close()


def vm(name: str, labels: dict[str, str] | None = None, policy: str = "AlwaysOff") -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"run_policy": policy},
    }


def test_get_watch_prints_the_list_then_every_change(
    live_server: LiveServer, clis: Callable[..., Cli]
) -> None:
    with live_server.client("operator") as client:
        client.post("/v1/vms", json=vm("web-1", {"app": "web"}))
        client.post("/v1/vms", json=vm("db-1", {"app": "db"}))
        cli = clis(live_server, "viewer", "get", "vms", "-l", "app=web", "-w")
        cli.wait_for(lambda line: line.startswith("NAME"), "the table header")
        cli.wait_for(lambda line: line.startswith("web-1"), "web-1 in the list")

        client.post("/v1/vms", json=vm("web-2", {"app": "web"}))
        cli.wait_for(lambda line: line.split()[:2] == ["ADDED", "web-2"], "web-2 added")
        client.patch("/v1/vms/web-1", json={"spec": {"cpu": 3}})
        cli.wait_for(
            lambda line: line.split()[:2] == ["MODIFIED", "web-1"] and " 3 " in line, "web-1 with 3 CPUs"
        )

        # the server ends every stream (as a restart would): the CLI goes on from where it was
        live_server.plane.api_context.streams.end_all()
        client.post("/v1/vms", json=vm("web-3", {"app": "web"}))
        client.post("/v1/vms", json=vm("db-2", {"app": "db"}))
        client.delete("/v1/vms/web-2")
        cli.wait_for(lambda line: line.split()[:2] == ["DELETED", "web-2"], "web-2 deleted")
        assert cli.interrupt() == 0
    assert [line.split()[:2] for line in cli.lines if line.startswith("ADDED")] == [
        ["ADDED", "web-2"],
        ["ADDED", "web-3"],
    ], "each change once, across the reconnect"
    assert not any("db-" in line for line in cli.lines)


def test_get_watch_with_a_timeout_ends_by_itself(live_server: LiveServer, clis: Callable[..., Cli]) -> None:
    # for scripts and the README: a watch that stops after --watch-timeout seconds, exit 0
    with live_server.client("operator") as client:
        client.post("/v1/vms", json=vm("web-1", {"app": "web"}))
    cli = clis(live_server, "viewer", "get", "vms", "-w", "--watch-timeout", "0.5")
    status, lines = cli.finish(timeout=30)
    assert status == 0, cli.stderr()
    assert [line.split()[0] for line in lines] == ["NAME", "web-1"]


def test_get_watch_as_json_prints_one_event_per_line(
    live_server: LiveServer, clis: Callable[..., Cli]
) -> None:
    with live_server.client("operator") as client:
        client.post("/v1/vms", json=vm("web-1"))
        cli = clis(live_server, "viewer", "get", "vm", "web-1", "-w", "-o", "json")
        first = json.loads(cli.wait_for(lambda line: line.startswith("{"), "the VM as an event"))
        assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "web-1"
        client.post("/v1/vms", json=vm("web-2"))  # another VM: not watched
        client.patch("/v1/vms/web-1", json={"metadata": {"labels": {"seen": "yes"}}})
        changed = json.loads(cli.wait_for(lambda line: '"seen": "yes"' in line, "the change of web-1"))
        assert changed["type"] == "MODIFIED"
        assert cli.interrupt() == 0
    assert not any("web-2" in line for line in cli.lines)


def test_events_follow_prints_new_events_as_they_happen(
    live_server: LiveServer, clis: Callable[..., Cli]
) -> None:
    live_server.store.record_event("Host", "node-1", "Connected", "before the command")
    cli = clis(live_server, "viewer", "events", "--follow", "--limit", "5")
    cli.wait_for(lambda line: "Connected" in line, "the recent event")
    live_server.store.record_event("Host", "node-1", "Enabled", "after it started")
    line = cli.wait_for(lambda text: "Enabled" in text, "the new event")
    assert "Host/node-1" in line and "after it started" in line
    live_server.plane.api_context.streams.end_all()
    live_server.store.record_event("VirtualMachine", "web-1", "Started")
    cli.wait_for(lambda text: "Started" in text, "an event after a reconnect")
    assert cli.interrupt() == 0
    assert [text.split()[2] for text in cli.lines] == ["Connected", "Enabled", "Started"]


def running_fleet(client: httpx.Client) -> None:
    client.post("/v1/hosts", json={"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
    for name in ("web-1", "web-2", "web-3", "db-1"):
        client.post(
            "/v1/vms",
            json=vm(
                name,
                {"app": name.split("-")[0]},
                "AlwaysOn" if name == "web-3" else "AlwaysOnUnlessStoppedManually",
            ),
        )
    deadline = time.monotonic() + 20
    while any(v["status"]["phase"] != "Running" for v in client.get("/v1/vms").json()["items"]):
        assert time.monotonic() < deadline, "the fleet did not start"
        time.sleep(0.05)


def test_vm_stop_with_a_selector_waits_for_every_vm(
    live_server: LiveServer, clis: Callable[..., Cli]
) -> None:
    with live_server.client("admin") as client:
        running_fleet(client)
        cli = clis(live_server, "operator", "vm", "stop", "-l", "app=web", "--wait", "--timeout", "60")
        status, lines = cli.finish()
        assert status == 1  # web-3 (AlwaysOn) was refused
        out = "\n".join(lines)
        stderr = " ".join(cli.stderr().split())
        assert "vm/web-3: refused (NotApplicable)" in out
        for name in ("web-1", "web-2"):
            assert f"created (Stop vm/{name})" in out
            assert f"vm/{name}: completed (VM {name} is stopped)" in out.splitlines()
        assert "Error (NotAllDone): Stop: 2 of 3 VM(s) completed; 1 refused" in stderr
        phases = {v["metadata"]["name"]: v["status"]["phase"] for v in client.get("/v1/vms").json()["items"]}
        assert phases == {"web-1": "Stopped", "web-2": "Stopped", "web-3": "Running", "db-1": "Running"}

        started = subprocess.run(
            [sys.executable, "-m", "virtplane.cli.main", "--url", live_server.url, "--token", live_server.tokens["operator"],
             "vm", "start", "--field-selector", "status.phase=Stopped", "--wait"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        assert "Start: 2 of 2 VM(s) completed" in started.stdout


def test_the_client_watch_resumes_where_it_was_and_says_when_it_cannot(live_server: LiveServer) -> None:
    streams = live_server.plane.api_context.streams

    def ended() -> None:  # the server ended the stream; the client has not read that yet
        deadline = time.monotonic() + 10
        while len(streams):
            assert time.monotonic() < deadline, "the stream did not end"
            time.sleep(0.01)

    with (
        live_server.client("operator") as writer,
        ApiClient(live_server.url, live_server.tokens["viewer"]) as api,
    ):
        start = writer.get("/v1/vms").json()["metadata"]["resource_version"]
        changes = api.watch("vms", start, sleep=lambda _: None, timeout_s=30)  # never hang
        writer.post("/v1/vms", json=vm("a-1"))
        assert next(changes)["object"]["metadata"]["name"] == "a-1"

        streams.end_all()
        ended()
        writer.post("/v1/vms", json=vm("b-1"))
        seen = [next(changes)]
        while seen[-1]["object"]["metadata"]["name"] != "b-1":
            seen.append(next(changes))
        assert [e["type"] for e in seen if e["object"]["metadata"]["name"] == "b-1"] == ["ADDED"]
        assert not [e for e in seen if e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "a-1"]

        streams.end_all()
        ended()
        writer.post("/v1/vms", json=vm("c-1"))
        writer.post("/v1/vms", json=vm("c-2"))
        live_server.store.compact_changes(keep_last=1)
        with pytest.raises(WatchExpired):
            for _ in range(100):
                next(changes)
