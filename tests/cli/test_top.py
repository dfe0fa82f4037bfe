"""``virtplane top vms|hosts`` against the live server, after collection rounds of the leader's
collector (run on the server's loop, where the simulator lives)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.cli.conftest import Invoke
from tests.conftest import LiveServer, seed_console_world, wait_json
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimLoad


class Clock:
    """The simulator's counters and the collector's rounds on one clock, 10 s a round."""

    def __init__(self, server: LiveServer) -> None:
        self.now = time.time() + 1000  # after the rounds the server ran on its own
        self.server = server
        assert server.plane.sim is not None
        server.plane.sim.meters.clock = self
        server.plane.usage_collector.wall_clock = self

    def __call__(self) -> float:
        return self.now

    def rounds(self, count: int) -> None:
        for _ in range(count):
            self.now += 10
            collect = self.server.plane.usage_collector.collect_once()
            asyncio.run_coroutine_threadsafe(collect, self.server.loop).result(10)


def _busy_world(server: LiveServer) -> None:
    with server.client() as admin:
        seed_console_world(admin)
        body = {
            "metadata": {"name": "db-1"},
            "spec": {"run_policy": "AlwaysOn", "cpu": 2, "memory_mib": 1024},
        }
        assert admin.post("/v1/vms", json=body).status_code == 201
        wait_json(admin, "/v1/vms/db-1", lambda vm: vm["status"]["phase"] == "Running")
        uids = {name: admin.get(f"/v1/vms/{name}").json()["metadata"]["uid"] for name in ("web-1", "db-1")}
    sim = server.plane.sim
    assert sim is not None
    server.in_loop(sim.set_load, domain_name(uids["web-1"]), SimLoad(cpu=0.2, memory=1.0))
    server.in_loop(sim.set_load, domain_name(uids["db-1"]), SimLoad(cpu=0.9, memory=0.1))
    Clock(server).rounds(2)


def test_top_vms_sorts_by_what_is_asked(server: LiveServer, invoke: Invoke) -> None:
    _busy_world(server)
    by_cpu = invoke("top", "vms", role="viewer")
    assert by_cpu.exit_code == 0, by_cpu.output
    assert by_cpu.output.index("db-1") < by_cpu.output.index("web-1")
    assert "by cpu" in by_cpu.output and "host-1" in by_cpu.output
    by_memory = invoke("top", "vms", "--sort", "memory", "--limit", "1", "-o", "json", role="viewer")
    answer = json.loads(by_memory.output)
    assert [row["name"] for row in answer["items"]] == ["web-1"] and answer["total"] == 2
    assert answer["items"][0]["memory_used_mib"] == 512.0


def test_top_hosts(server: LiveServer, invoke: Invoke) -> None:
    _busy_world(server)
    hosts = invoke("top", "hosts", "--sort", "memory", role="viewer")
    assert hosts.exit_code == 0, hosts.output
    assert "host-1" in hosts.output and "LOAD" in hosts.output
    assert "2.00" in hosts.output  # load: 0.2 x 1 vCPU + 0.9 x 2


def test_a_bad_sort_is_refused_before_asking(server: LiveServer, invoke: Invoke) -> None:
    refused = invoke("top", "vms", "--sort", "fast", role="viewer")
    assert refused.exit_code != 0 and "fast" in refused.output


def test_sim_load_sets_the_guests_use(server: LiveServer, invoke: Invoke) -> None:
    with server.client() as admin:
        seed_console_world(admin)
    assert invoke("sim", "load", "web-1", "--cpu", "60", role="operator").exit_code != 0  # admin's, as faults
    done = invoke("sim", "load", "web-1", "--cpu", "60", "--memory", "50")
    assert done.exit_code == 0, done.output
    Clock(server).rounds(2)
    answer = json.loads(invoke("top", "vms", "-o", "json", role="viewer").output)
    assert answer["items"][0]["cpu_pct"] == pytest.approx(60.0)
    assert answer["items"][0]["memory_used_mib"] == 256.0
    missing = invoke("sim", "load", "nope", "--cpu", "1")
    assert missing.exit_code != 0 and "nope" in missing.output


def test_get_hosts_wide_and_describe_host_show_real_use_beside_allocation(
    server: LiveServer, invoke: Invoke
) -> None:
    _busy_world(server)
    wide = invoke("get", "hosts", "-o", "wide", role="viewer")
    assert wide.exit_code == 0, wide.output
    header, row = wide.output.splitlines()[:2]
    assert "CPU USE" in header and "MEM USE" in header
    assert "26%" in row  # 2.0 busy vCPUs of 8, and the host's own 1 %
    assert "1.1Gi/8Gi" in row, row  # 512 MiB its own, 102 + 512 its guests
    plain = invoke("get", "hosts", role="viewer")
    assert "CPU USE" not in plain.output  # the default table keeps its columns
    described = invoke("describe", "host", "host-1", role="viewer")
    assert described.exit_code == 0, described.output
    assert "Use now:" in described.output and "Load (1 min):" in described.output
    assert "2.00" in described.output


def test_watch_redraws_each_interval_until_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--watch``: a fresh answer at each interval, drawn in place, until Ctrl-C (no real waits:
    the interval's sleep is recorded, and the second one is the user's Ctrl-C)."""
    import io

    from rich.console import Console

    from virtplane.cli import top

    answers = [
        {"sort": "cpu", "total": 1, "interval_s": 10.0, "items": [{"name": f"h{i}", **HOST_ROW}]}
        for i in range(3)
    ]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(top.time, "sleep", sleep)
    out = io.StringIO()
    top._watch(
        Console(file=out, width=120, force_terminal=True), lambda: answers.pop(0), top.Kind.HOSTS, 10.0
    )
    assert slept == [10.0, 10.0]
    assert len(answers) == 1  # the first draw, then one redraw: the Ctrl-C came in the second wait
    assert "h0" in out.getvalue() and "h1" in out.getvalue()


HOST_ROW = {
    "cpu_pct": 12.5,
    "memory_used_mib": 1024.0,
    "memory_total_mib": 8192.0,
    "load1": None,
    "disk_read_bps": 0.0,
    "disk_write_bps": 2048.0,
    "net_rx_bps": None,
    "net_tx_bps": None,
}
