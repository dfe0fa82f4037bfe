"""A live migration in flight outlives the control plane that started it (real QEMU, two daemons).

libvirt carries a peer-to-peer migration to its end when its client dies. A control
plane that restarts (or a replica that takes over) must follow it from the daemons,
let it finish, and count it as done: never a failed attempt, never a second copy.

Two scenarios, each on a real `virtplane serve` subprocess managing the rig's daemons:
- SIGKILL of a single server (SQLite) in the middle of a bandwidth-limited Migrate;
- SIGKILL of the leader of two replicas (PostgreSQL) in the middle of a drain.

"Ran in exactly one place" is checked with the daemons themselves: a recorder in this
process follows both daemons' lifecycle events for the whole test, and the guest's
serial console shows one boot.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess
from tests.postgres.pg import fresh_schema, pg_url_or_skip

from .conftest import INITRD_FILE, KERNEL_FILE, Rig

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

LIMIT_S = 180.0  # guards against a hang only
BANDWIDTH_MIB_S = 8  # a 256 MiB guest dirtying 32 MiB takes ~10 s to move at this rate


@dataclass
class Recorder:
    """Every lifecycle event of the two daemons, in order: (host, domain, event, detail)."""

    events: list[tuple[str, str, int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, domain: str) -> list[tuple[str, int, int]]:
        with self.lock:
            return [(h, e, d) for h, name, e, d in self.events if name == domain]


@contextlib.contextmanager
def recording(rig: Rig) -> Iterator[Recorder]:
    import libvirt

    from virtplane.drivers.libvirt.events import ensure_event_loop

    ensure_event_loop()
    recorder = Recorder()
    connections = []
    for name, host in rig.hosts.items():
        conn = libvirt.open(host.uri)

        def on_event(_c: Any, dom: Any, event: int, detail: int, _o: Any, host: str = name) -> None:
            with recorder.lock:
                recorder.events.append((host, dom.name(), event, detail))

        conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_event, None)
        connections.append(conn)
    try:
        yield recorder
    finally:
        for conn in connections:
            conn.close()


def ran_in_one_place(recorder: Recorder, domain: str) -> None:
    """No boot after the first anywhere; the only other start is the arrival by migration;
    and the guest is resumed on a host only after it was suspended or stopped on the other."""
    import libvirt

    events = recorder.of(domain)
    boots = [
        e
        for e in events
        if e[1] == libvirt.VIR_DOMAIN_EVENT_STARTED and e[2] != libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED
    ]
    assert len(boots) == 1, f"the guest booted {len(boots)} times: {events}"
    live: set[str] = set()
    for host, event, detail in events:
        if event in (libvirt.VIR_DOMAIN_EVENT_STARTED, libvirt.VIR_DOMAIN_EVENT_RESUMED):
            if not (
                event == libvirt.VIR_DOMAIN_EVENT_STARTED
                and detail == libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED
            ):
                live.add(host)  # an arriving guest is paused until the switch-over resumes it
        elif event in (libvirt.VIR_DOMAIN_EVENT_STOPPED, libvirt.VIR_DOMAIN_EVENT_SUSPENDED):
            live.discard(host)
        assert len(live) <= 1, f"running on {sorted(live)} at once: {events}"  # fmt: skip


def source_migrating(rig: Rig, host: str, domain: str) -> bool:
    """The daemon itself reports an outgoing migration of ``domain`` that has sent data."""
    import libvirt

    conn = libvirt.open(rig.hosts[host].uri)
    try:
        stats = conn.lookupByName(domain).jobStats(0)
    except libvirt.libvirtError:
        return False
    finally:
        conn.close()
    return bool(
        stats.get("operation") == libvirt.VIR_DOMAIN_JOB_OPERATION_MIGRATION_OUT
        and stats.get("data_processed", 0) > 0
    )


def wait(check: Any, what: str, limit_s: float = LIMIT_S) -> Any:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {limit_s}s")


def ok(response: httpx.Response) -> Any:
    assert response.status_code in (200, 201), response.text
    return response.json()


def seed_fleet(c: httpx.Client, rig: Rig) -> None:
    """The rig's two hosts, its shared pool and image library, and the guest's kernel and initrd."""
    for name in ("a", "b"):
        ok(
            c.post(
                "/v1/hosts",
                json={
                    "metadata": {"name": name},
                    "spec": {"uri": rig.hosts[name].uri, "capacity": {"vcpus": 4, "memory_mib": 2048}},
                },
            )
        )
    ok(
        c.post(
            "/v1/storagepools",
            json={
                "metadata": {"name": "shared"},
                "spec": {
                    "kind": "shared",
                    "cluster": "default",
                    "path": rig.shared_pool.path,
                    "capacity_gib": 100,
                },
            },
        )
    )
    ok(
        c.post(
            "/v1/storagepools",
            json={
                "metadata": {"name": "library"},
                "spec": {
                    "kind": "shared",
                    "cluster": "default",
                    "path": rig.library_pool.path,
                    "capacity_gib": 10,
                    "content": "images",
                },
            },
        )
    )
    for name, file, kind in (
        ("guest-kernel", KERNEL_FILE, "Kernel"),
        ("guest-initrd", INITRD_FILE, "Initrd"),
    ):
        ok(
            c.post(
                "/v1/images",
                json={"metadata": {"name": name}, "spec": {"pool": "library", "file": file, "kind": kind}},
            )
        )
        wait(lambda name=name: ok(c.get(f"/v1/images/{name}"))["status"]["phase"] == "Ready", f"image {name}")


def seed(c: httpx.Client, rig: Rig) -> None:
    seed_fleet(c, rig)
    ok(c.patch("/v1/settings/migration.bandwidth_mib_s", json={"spec": {"value": str(BANDWIDTH_MIB_S)}}))
    ok(
        c.post(
            "/v1/volumes", json={"metadata": {"name": "fo-root"}, "spec": {"pool": "shared", "size_gib": 1}}
        )
    )
    ok(c.post("/v1/vms", json={"metadata": {"name": "fo"}, "spec": {
        "run_policy": "AlwaysOn", "cpu": 1, "memory_mib": 256, "termination_grace_period_s": 20,
        "disks": [{"volume": "fo-root", "boot_order": 1}],
        "boot": {"kernel": "guest-kernel", "initrd": "guest-initrd", "cmdline": "console=ttyS0 panic=-1 quiet dirty=32"},
    }}))  # fmt: skip


def vm(c: httpx.Client) -> dict[str, Any]:
    result: dict[str, Any] = ok(c.get("/v1/vms/fo"))
    return result


def console(data_dir: Path, uid: str) -> str:
    path = data_dir / "consoles" / f"virtplane-{uid}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def events_of(c: httpx.Client, reason: str) -> list[dict[str, Any]]:
    return [e for e in ok(c.get("/v1/events", params={"limit": 1000}))["items"] if e["reason"] == reason]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data")
    yield proc
    proc.stop()


def cleanup(rig: Rig, domain: str, volume_file: str) -> None:
    """Remove the test's domain from both daemons and its volume's file from the shared pool."""
    import libvirt

    if volume_file:
        with contextlib.suppress(OSError):
            (Path(rig.shared_pool.path) / volume_file).unlink()

    for host in rig.hosts.values():
        conn = libvirt.open(host.uri)
        with contextlib.suppress(libvirt.libvirtError):
            dom = conn.lookupByName(domain)
            with contextlib.suppress(libvirt.libvirtError):
                dom.destroy()
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA)  # a backup's checkpoint
        conn.close()


def test_sigkill_mid_migration_the_restarted_server_lets_it_finish(rig: Rig, server: ServerProcess) -> None:
    server.start()
    domain = volume_file = ""
    with recording(rig) as recorder:
        try:
            with server.client() as c:
                seed(c, rig)
                running = wait(lambda: (v := vm(c))["status"]["phase"] == "Running" and v, "VM running")
                domain, source = f"virtplane-{running['metadata']['uid']}", running["status"]["host"]
                volume_file = ok(c.get("/v1/volumes/fo-root"))["status"]["file"]
                wait(lambda: "TICK 1" in console(server.data_dir, running["metadata"]["uid"]), "guest up")
                ok(
                    c.post(
                        "/v1/operations",
                        json={"metadata": {"name": "move"}, "spec": {"vm": "fo", "type": "Migrate"}},
                    )
                )
            wait(lambda: source_migrating(rig, source, domain), "migration under way")
            server.kill()
            assert source_migrating(rig, source, domain), "the migration goes on without its client"
            server.start()
            with server.client() as c:
                done = wait(lambda: (o := ok(c.get("/v1/operations/move")))["status"]["phase"] in ("Completed", "Failed") and o,
                            "operation ended")  # fmt: skip
                assert done["status"]["phase"] == "Completed", done["status"]
                # the operation ends with the migration; the VM's own look follows it
                after = wait(lambda: (v := vm(c))["status"]["phase"] == "Running" and v, "VM running again")
                assert after["status"]["host"] != source
                assert not events_of(c, "MigrationFailed")
                assert len([e for e in events_of(c, "Started") if e["name"] == "fo"]) == 1
            ran_in_one_place(recorder, domain)
            assert console(server.data_dir, after["metadata"]["uid"]).count("GUEST-UP") == 1
        finally:
            server.kill()
            if domain:
                cleanup(rig, domain, volume_file)


def test_leader_killed_mid_drain_the_new_leader_finishes_it(rig: Rig, tmp_path: Path) -> None:
    base = pg_url_or_skip()
    with fresh_schema(base) as url:
        extra = ["--db", url, "--leader-lease-seconds", "3"]
        first = ServerProcess(tmp_path / "first", extra_args=extra)
        second = ServerProcess(tmp_path / "second", extra_args=extra)
        domain = volume_file = ""
        with recording(rig) as recorder:
            try:
                first.start()
                wait(
                    lambda: httpx.get(f"{first.url}/healthz").json()["controllers"]["role"] == "leader",
                    "leader",
                )
                second.start()
                second_token = (tmp_path / "second" / "admin.token").read_text().strip()
                with first.client() as c:
                    seed(c, rig)
                    running = wait(lambda: (v := vm(c))["status"]["phase"] == "Running" and v, "VM running")
                    domain, source = f"virtplane-{running['metadata']['uid']}", running["status"]["host"]
                    volume_file = ok(c.get("/v1/volumes/fo-root"))["status"]["file"]
                    wait(lambda: "TICK 1" in console(first.data_dir, running["metadata"]["uid"]), "guest up")
                    ok(c.post(f"/v1/hosts/{source}/maintenance", json={"strategy": "Migration"}))
                wait(lambda: source_migrating(rig, source, domain), "migration under way")
                first.kill()
                health = httpx.get(f"{second.url}/healthz").json()["controllers"]
                assert health["role"] == "follower"
                headers = {"Authorization": f"Bearer {second_token}"}
                with httpx.Client(base_url=second.url, headers=headers, timeout=10) as c:
                    wait(lambda: c.get("/healthz").json()["controllers"]["role"] == "leader", "takeover")
                    drained = wait(lambda: (m := ok(c.get(f"/v1/hosts/{source}/maintenance")))["host_state"]
                                   in ("Maintenance", "ErrorInMaintenance") and m, "drain ended")  # fmt: skip
                    assert drained["host_state"] == "Maintenance", drained
                    assert "fo" in drained["migrated_vms"], drained
                    # the drain ends with the migration; the VM's own look follows it
                    after = wait(
                        lambda: (v := vm(c))["status"]["phase"] == "Running" and v, "VM running again"
                    )
                    assert after["status"]["host"] != source
                    assert not events_of(c, "MigrationFailed")
                ran_in_one_place(recorder, domain)
                uid = after["metadata"]["uid"]
                logs = console(first.data_dir, uid) + console(second.data_dir, uid)
                assert logs.count("GUEST-UP") == 1
            finally:
                first.kill()
                second.kill()
                if domain:
                    cleanup(rig, domain, volume_file)
