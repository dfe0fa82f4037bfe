"""Crash-injection harness: a random workload on a simulated fleet, SIGKILLs at random moments, invariants.

Runs the real server as a subprocess (6 hosts, 60 VMs of every run policy by
default), drives rounds of random actions — restores, maintenance enable/cancel
with every strategy, start/stop/restart, guest shutdowns and crashes, failing
boots, failing migrations, a host going down and back (a flap), a host failing for good
until its simulated BMC fences it (issue 15) — and kills the server with SIGKILL
in the middle of each round, restarting it on the same data. A model of what each
VM's power state must be is kept here, in the test process; at the end every
invariant is checked against the API and against the simulated hypervisors' own
state file. What the workload did, and when, is written to ``history.log`` in the data
directory beside the server's ``server.log`` (the store keeps each VM's events).

    python -m tests.harness.crash --kills 500 --seed 1234      # the long run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.crash.server import ServerProcess, intents_left

POLICIES = ("AlwaysOn", "AlwaysOff", "Manual", "AlwaysOnUnlessStoppedManually")
STRATEGIES = ("Error", "Migration", "ForceStop", "Stop")
FINISHED = ("Completed", "Failed", "Superseded")


@dataclass
class Report:
    seed: int
    kills: int = 0
    rounds: int = 0
    faults_injected: int = 0
    operations: int = 0
    restores: int = 0
    maintenances: int = 0
    fences: int = 0
    invariant_violations: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Harness:
    def __init__(
        self,
        data_dir: Path,
        *,
        seed: int,
        kills: int,
        hosts: int = 6,
        vms: int = 60,
        server_args: list[str] | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.report = Report(seed=seed)
        self.target_kills = kills
        self.host_names = [f"h{i}" for i in range(1, hosts + 1)]
        self.vm_names = [f"vm-{i:02d}" for i in range(vms)]
        self.policy = {name: POLICIES[i % len(POLICIES)] for i, name in enumerate(self.vm_names)}
        # Local disks for a fifth of the VMs: they pin the VM and exercise the strategies.
        self.local = {name: i % 5 == 0 for i, name in enumerate(self.vm_names)}
        self.expected: dict[str, str] = {}
        # Manual VMs migrating off a host when it went down: Running if the switch-over came
        # first, Stopped (last_exit host-failure) if the host died first; no API read tells which
        self.maybe_host_failed: set[str] = set()
        # server_args: e.g. the roles apart (serve --workers 2), killed as one by SIGKILL of serve
        self.server = ServerProcess(data_dir, boot_s=0.05, shutdown_s=0.05, extra_args=server_args)
        self.counter = 0
        self.outstanding: list[tuple[str, str, str]] = []
        self.history = data_dir / "history.log"

    def note(self, text: str) -> None:
        """One line of what the workload did and what the model expects, beside the server's log."""
        with self.history.open("a") as out:
            out.write(f"{time.time():.3f} kill {self.report.kills} round {self.report.rounds}: {text}\n")

    # ------------------------------------------------------------------ plumbing

    def client(self) -> httpx.Client:
        return self.server.client()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response | None:
        """One API call; a server that dies meanwhile is expected here and returns None."""
        try:
            with self.client() as c:
                return c.request(method, path, json=body)
        except httpx.TransportError:
            return None

    def get(self, path: str) -> Any:
        for _ in range(100):
            response = self.call("GET", path)
            if response is not None and response.status_code == 200:
                return response.json()
            self.ensure_running()
            time.sleep(0.05)
        raise RuntimeError(f"GET {path} kept failing")

    def ensure_running(self) -> None:
        proc = self.server.proc
        if proc is None or proc.poll() is not None:
            self.server.proc = None
            self.server.start()

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    # ------------------------------------------------------------------ set-up

    def seed_fleet(self) -> None:
        self.server.start()
        objects: list[tuple[str, dict[str, Any]]] = [
            (
                "secrets",
                {
                    "kind": "Secret",
                    "metadata": {"name": "bmc"},
                    "spec": {"username": "root", "password": "pw"},
                },
            )
        ]
        for host in self.host_names:
            objects.append(
                (
                    "hosts",
                    {
                        "kind": "Host",
                        "metadata": {"name": host},
                        "spec": {
                            "uri": f"sim://{host}",
                            "cluster": "c1",
                            "capacity": {"vcpus": 64, "memory_mib": 65536},
                            "fencing": {
                                "redfish": {
                                    "address": f"https://bmc-{host}.invalid",
                                    "system_id": host,
                                    "credentials_secret": "bmc",
                                }
                            },
                        },
                    },
                )
            )
            objects.append(
                (
                    "storagepools",
                    {
                        "kind": "StoragePool",
                        "metadata": {"name": f"{host}-local"},
                        "spec": {"kind": "local", "host": host, "capacity_gib": 1000, "driver_pool": "local"},
                    },
                )
            )
        objects.append(
            (
                "storagepools",
                {
                    "kind": "StoragePool",
                    "metadata": {"name": "shared"},
                    "spec": {"kind": "shared", "cluster": "c1", "capacity_gib": 10000},
                },
            )
        )
        for i, vm in enumerate(self.vm_names):
            pool = f"{self.host_names[i % len(self.host_names)]}-local" if self.local[vm] else "shared"
            objects.append(
                (
                    "volumes",
                    {
                        "kind": "Volume",
                        "metadata": {"name": f"{vm}-root"},
                        "spec": {"pool": pool, "size_gib": 1},
                    },
                )
            )
            objects.append(
                (
                    "vms",
                    {
                        "kind": "VirtualMachine",
                        "metadata": {"name": vm},
                        "spec": {
                            "run_policy": self.policy[vm],
                            "cpu": 1,
                            "memory_mib": 512,
                            "disks": [{"volume": f"{vm}-root", "boot_order": 1}],
                            "termination_grace_period_s": 1,
                        },
                    },
                )
            )
            self.expected[vm] = (
                "Running" if self.policy[vm] in ("AlwaysOn", "AlwaysOnUnlessStoppedManually") else "Stopped"
            )
        with self.client() as c:
            for plural, body in objects:
                response = c.post(f"/v1/{plural}", json=body)
                assert response.status_code == 201, response.text
            for key, value in (
                ("vm.start.backoff_base_s", "0.05"),
                ("vm.start.backoff_cap_s", "0.5"),
                ("migration.progress_timeout_s", "5"),
                # a host down for over a second is fenced; the flaps of host_down_up are shorter
                ("host.liveness.disconnected_after_s", "0.4"),
                ("host.liveness.reconnected_after_s", "0.3"),
                ("host.fencing.after_s", "0.8"),
                ("host.fencing.retry_base_s", "0.1"),
                ("host.fencing.retry_cap_s", "1"),
            ):
                c.patch(f"/v1/settings/{key}", json={"spec": {"value": value}})
        self.wait_quiet(timeout=120)
        # every policy in both power states from the start: half the Manual VMs running,
        # half the AlwaysOnUnlessStoppedManually ones stopped
        for i, vm in enumerate(self.vm_names):
            policy = self.policy[vm]
            if i % 8 < 4 and policy in ("Manual", "AlwaysOnUnlessStoppedManually"):
                kind = "Start" if policy == "Manual" else "Stop"
                self.expected[vm] = "Running" if kind == "Start" else "Stopped"
                self.operate(vm, kind)
        self.wait_quiet(timeout=120)
        with self.client() as c:  # a first snapshot of every VM, so restores can start at once
            for vm in self.vm_names:
                c.post(
                    "/v1/snapshots",
                    json={
                        "kind": "VirtualMachineSnapshot",
                        "metadata": {"name": f"{vm}-base"},
                        "spec": {"vm": vm},
                    },
                )
        self.wait_quiet(timeout=60)

    # ------------------------------------------------------------------ actions

    def vm_status(self, vm: str) -> dict[str, Any]:
        status: dict[str, Any] = self.get(f"/v1/vms/{vm}")["status"]
        return status

    def operate(self, vm: str, kind: str, **extra: Any) -> str:
        name = self.name(f"{vm}-{kind.lower()}")
        body = {
            "kind": "VirtualMachineOperation",
            "metadata": {"name": name},
            "spec": {"vm": vm, "type": kind, **extra},
        }
        response = self.call("POST", "/v1/operations", body)
        if response is None:  # the server died while answering: find out whether it was stored
            self.ensure_running()
            found = self.call("GET", f"/v1/operations/{name}")
            if found is None or found.status_code != 200:
                return ""
        elif response.status_code != 201:
            return ""  # refused (not applicable now): a correct answer, nothing to track
        self.report.operations += 1
        self.note(f"{vm} {kind} {name} issued {extra}")
        return name

    def fault(self, host: str, kind: str, vm: str | None = None, count: int = 1) -> bool:
        response = self.call("POST", f"/v1/hosts/{host}/faults", {"kind": kind, "vm": vm, "count": count})
        ok = response is not None and response.status_code == 200
        self.note(f"fault {kind} on {host} ({vm}, {count}): {'ok' if ok else 'failed'}")
        if ok:
            self.report.faults_injected += 1
        return ok

    def random_round(self) -> list[tuple[str, str, str]]:
        """Issue a few random actions on distinct VMs; returns what to wait for: (kind, name, vm)."""
        pending: list[tuple[str, str, str]] = []
        # Host-level events first; VMs on the hosts they touch get no action of their own this
        # round, so the model never has to order two causes for one VM.
        busy_hosts: set[str] = set()
        if self.rng.random() < 0.25:
            busy_hosts |= self.maintenance_action(pending)
        if self.rng.random() < 0.1:
            busy_hosts |= self.host_down_up(pending)
        elif self.rng.random() < 0.1:
            busy_hosts |= self.host_down_up(pending, fenced=True)
        busy_vms = self.follow_up()
        statuses = {v["metadata"]["name"]: v["status"] for v in self.get("/v1/vms")["items"]}
        candidates = [v for v in self.vm_names if statuses[v]["host"] not in busy_hosts and v not in busy_vms]
        vms = self.rng.sample(candidates, k=min(len(candidates), self.rng.randint(3, 6)))
        for vm in vms:
            status = statuses[vm]
            phase, host = status["phase"], status["host"]
            self.note(f"{vm} pick (phase {phase}, host {host}, last_exit {status['last_exit']})")
            # restores weigh double: keeping the power state through them is the point of the project
            choice = self.rng.choice(
                [
                    "start",
                    "stop",
                    "restart",
                    "restore",
                    "restore",
                    "guest-shutdown",
                    "crash",
                    "fail-start",
                    "snapshot",
                ]
            )
            if choice == "snapshot" or (choice == "restore" and not self.snapshots_of(vm)):
                snap = self.name(f"{vm}-snap")
                self.call(
                    "POST",
                    "/v1/snapshots",
                    {"kind": "VirtualMachineSnapshot", "metadata": {"name": snap}, "spec": {"vm": vm}},
                )
                pending.append(("snapshot", snap, vm))
            elif choice == "restore":
                before = self.expected[vm]
                op = self.operate(
                    vm,
                    "Restore",
                    restore={"snapshot": self.rng.choice(self.snapshots_of(vm)), "mode": "Strict"},
                )
                if op:
                    self.report.restores += 1
                    pending.append(("restore", op, before))
            elif choice in ("start", "stop", "restart"):
                op = self.operate(vm, choice.capitalize(), force=self.rng.random() < 0.3)
                if op:
                    pending.append((choice, op, vm))
            elif phase == "Running" and host:
                count = self.rng.randint(1, 3)
                if choice == "fail-start":
                    if self.fault(host, "fail-start", vm, count) and self.fault(host, "crash", vm):
                        pending.append(("crash", "", vm))
                elif self.fault(host, choice, vm):
                    pending.append((choice, "", vm))
        return pending

    def snapshots_of(self, vm: str) -> list[str]:
        items = self.get("/v1/snapshots")["items"]
        return [
            s["metadata"]["name"] for s in items if s["spec"]["vm"] == vm and s["status"]["phase"] == "Ready"
        ]

    def maintenance_action(self, pending: list[tuple[str, str, str]]) -> set[str]:
        hosts = self.get("/v1/hosts")["items"]
        in_maintenance = [h["metadata"]["name"] for h in hosts if h["status"]["resource_state"] != "Enabled"]
        if in_maintenance:
            host = self.rng.choice(in_maintenance)
            response = self.call("DELETE", f"/v1/hosts/{host}/maintenance")
            self.note(f"maintenance cancel on {host}: {response.status_code if response else None}")
            if response is not None and response.status_code < 300:
                pending.append(("cancel", host, ""))
            return {host}
        host = self.rng.choice(self.host_names)
        if self.rng.random() < 0.3:
            self.fault(host, "fail-migration", None, self.rng.randint(1, 2))
        strategy = self.rng.choice(STRATEGIES)
        response = self.call(
            "POST", f"/v1/hosts/{host}/maintenance", {"strategy": strategy, "dry_run": False}
        )
        self.note(f"maintenance {strategy} on {host}: {response.status_code if response else None}")
        if response is not None and response.status_code < 300:
            self.report.maintenances += 1
            pending.append(("maintenance", host, strategy))
        return {host}

    def host_down_up(self, pending: list[tuple[str, str, str]], fenced: bool = False) -> set[str]:
        """A host goes down: back after a short while (a flap, never fenced), or, ``fenced``,
        for good until its BMC fences it; then it is repaired and an admin clears the fence."""
        host = self.rng.choice(self.host_names)
        # Manual VMs running there stay stopped after a host failure (§3); the others come back.
        statuses = {v["metadata"]["name"]: v["status"] for v in self.get("/v1/vms")["items"]}
        if not self.fault(host, "host-down"):
            return set()
        for vm in self.vm_names:
            status = statuses[vm]
            if status["host"] != host or self.policy[vm] != "Manual":
                continue
            if status["phase"] in ("Running", "Starting"):
                self.expected[vm] = "Stopped"
            elif status["phase"] == "Migrating":
                self.maybe_host_failed.add(vm)
        if fenced:
            pending.append(("fence", host, ""))
            return {host}
        time.sleep(self.rng.uniform(0.05, 0.3))
        self.fault(host, "host-up")
        pending.append(("host-up", host, ""))
        return {host}

    def repair(self, host: str) -> None:
        """The host is back (its stale domains get removed); the admin returns it to service."""
        self.fault(host, "host-up")
        for _ in range(100):
            response = self.call("PATCH", f"/v1/hosts/{host}", {"spec": {"fenced": False}})
            if response is not None and response.status_code == 200:
                self.note(f"fence of {host} cleared")
                return
            self.ensure_running()
            time.sleep(0.05)
        self.report.invariant_violations.append(f"could not clear the fence of {host}")

    # ------------------------------------------------------------------ waiting and the model

    def wait_round(self, pending: list[tuple[str, str, str]], timeout: float = 20.0) -> None:
        """Wait a while for this round's work; operations that legitimately wait longer (a start on a
        VM whose only host is in maintenance) are followed up later, and must end by the finish."""
        deadline = time.monotonic() + timeout
        for kind, name, extra in pending:
            if kind in ("start", "stop", "restart", "restore"):
                op = self.wait_until(
                    f"/v1/operations/{name}", lambda o: o["status"]["phase"] in FINISHED, deadline
                )
                if op is not None and op["status"]["phase"] in FINISHED:
                    self.apply_operation(kind, op, extra)
                else:
                    self.outstanding.append((kind, name, extra))
            elif kind == "snapshot":
                self.wait_until(
                    f"/v1/snapshots/{name}", lambda s: s["status"]["phase"] in ("Ready", "Failed"), deadline
                )
            elif kind in ("guest-shutdown", "crash"):
                self.note(f"{extra} {kind}")
                policy = self.policy[extra]
                if kind == "guest-shutdown" and policy in ("Manual", "AlwaysOnUnlessStoppedManually"):
                    self.expected[extra] = "Stopped"
                if kind == "crash" and policy == "Manual":
                    self.expected[extra] = "Stopped"
            elif kind == "fence":
                host = self.wait_until(f"/v1/hosts/{name}", lambda h: h["spec"]["fenced"], deadline + 20)
                if host is None or not host["spec"]["fenced"]:
                    status = host["status"] if host else None
                    self.report.invariant_violations.append(f"host {name} was not fenced in time: {status}")
                else:
                    self.report.fences += 1
                # its must-run VMs on shared storage recover elsewhere before it comes back
                self.wait_quiet(timeout=20, allow_held=True, ignore_host=name)
                self.repair(name)
            elif kind == "maintenance":
                self.wait_until(
                    f"/v1/hosts/{name}",
                    lambda h: h["status"]["resource_state"] in ("Maintenance", "ErrorInMaintenance"),
                    deadline,
                )

    def follow_up(self, final: bool = False) -> set[str]:
        """Apply the operations that ended since; returns the VMs that still have one running."""
        still, busy = [], set()
        for kind, name, extra in self.outstanding:
            op = self.get(f"/v1/operations/{name}")
            if op["status"]["phase"] in FINISHED:
                self.apply_operation(kind, op, extra)
            else:
                still.append((kind, name, extra))
                busy.add(op["spec"]["vm"])
                if final:
                    self.report.invariant_violations.append(f"operation {name} never ended: {op['status']}")
        self.outstanding = still
        return busy

    def wait_until(self, path: str, check: Any, deadline: float) -> Any:
        """GET ``path`` until ``check`` holds or the deadline passes; returns the last body."""
        body: Any = None
        while time.monotonic() < deadline:
            response = self.call("GET", path)
            if response is None:
                self.ensure_running()
                continue
            if response.status_code == 200:
                body = response.json()
                if check(body):
                    return body
            time.sleep(0.05)
        return body

    def apply_operation(self, kind: str, op: dict[str, Any] | None, extra: str) -> None:
        if op is not None:
            self.note(f"{op['spec']['vm']} {kind} {op['metadata']['name']} {op['status']['phase']} ({extra})")
        if op is None or op["status"]["phase"] != "Completed":
            return
        vm = op["spec"]["vm"]
        self.maybe_host_failed.discard(vm)
        if kind == "start":
            self.expected[vm] = "Running"
        elif kind == "stop":
            self.expected[vm] = "Stopped"
        elif kind == "restart":
            self.expected[vm] = "Running"
        elif kind == "restore":
            # the power state before the restore comes back, whatever the snapshot's policy says
            self.expected[vm] = extra

    def expected_now(self, vm: str) -> str:
        policy = self.policy[vm]
        if policy == "AlwaysOn":
            return "Running"
        if policy == "AlwaysOff":
            return "Stopped"
        return self.expected[vm]

    def wait_quiet(
        self, timeout: float = 60.0, allow_held: bool = False, ignore_host: str | None = None
    ) -> bool:
        """Until every operation ended and every VM settled in Running or Stopped.

        ``allow_held``: VMs that a host maintenance holds stopped count as settled.
        ``ignore_host``: VMs still on this (fenced) host wait for it, and count as settled.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ops = self.get("/v1/operations")["items"]
            vms = self.get("/v1/vms")["items"]
            busy = [o for o in ops if o["status"]["phase"] not in FINISHED]
            unsettled = [
                v for v in vms
                if (ignore_host is None or v["status"]["host"] != ignore_host)
                and (
                    v["status"]["phase"] not in ("Running", "Stopped")
                    or (
                        intents_left(v)
                        and not (allow_held and v["metadata"]["annotations"].get("virtplane.io/held-by", "").startswith("maintenance/"))
                    )
                )
            ]  # fmt: skip
            if not busy and not unsettled:
                return True
            time.sleep(0.1)
        return False

    # ------------------------------------------------------------------ run

    def run(self) -> Report:
        started = time.monotonic()
        self.seed_fleet()
        while self.report.kills < self.target_kills:
            self.report.rounds += 1
            pending = self.random_round()
            time.sleep(self.rng.uniform(0.0, 0.6))
            self.server.kill()
            self.report.kills += 1
            self.note("killed")
            self.server.start()
            self.wait_round(pending)
            self.wait_quiet(timeout=5, allow_held=True)
        self.finish()
        self.report.seconds = round(time.monotonic() - started, 1)
        return self.report

    def finish(self) -> None:
        # end every maintenance so VMs they stopped come back, then let everything settle
        for host in self.get("/v1/hosts")["items"]:
            if host["status"]["resource_state"] != "Enabled":
                self.call("DELETE", f"/v1/hosts/{host['metadata']['name']}/maintenance")
            if host["spec"]["fenced"]:  # a round cut short before the repair
                self.repair(host["metadata"]["name"])
        if not self.wait_quiet(timeout=120):
            self.report.invariant_violations.append(
                "the fleet did not settle within 120 s after the workload"
            )
        # a VM that would start (or flip) later must be caught: have every stopped VM looked at again
        for vm in self.get("/v1/vms")["items"]:
            if vm["status"]["phase"] == "Stopped":
                try:
                    self.server.look_again_at_stopped_vm(vm["metadata"]["name"])
                except AssertionError as exc:
                    self.report.invariant_violations.append(f"a spec change was never reconciled: {exc}")
        self.wait_quiet(timeout=60)
        self.follow_up(final=True)
        self.check_invariants()
        self.server.stop()
        self.check_hypervisors()

    def check_invariants(self) -> None:
        bad = self.report.invariant_violations
        vms = {v["metadata"]["name"]: v for v in self.get("/v1/vms")["items"]}
        for name in self.vm_names:
            if name not in vms:
                bad.append(f"VM {name} is gone")
        hosts = {h["metadata"]["name"]: h for h in self.get("/v1/hosts")["items"]}
        for name, vm in vms.items():
            phase = vm["status"]["phase"]
            want = self.expected_now(name)
            host_failed = name in self.maybe_host_failed and vm["status"]["last_exit"] == "host-failure"
            if phase != want and not (host_failed and phase == "Stopped"):
                bad.append(
                    f"VM {name} ({self.policy[name]}) is {phase}, expected {want}; last_exit {vm['status']['last_exit']}"
                )
            leftovers = intents_left(vm)
            if leftovers:
                bad.append(f"VM {name} has intents left over: {leftovers}")
            host = vm["status"]["host"]
            if phase == "Running" and host and hosts[host]["status"]["resource_state"] in ("Maintenance",):
                bad.append(f"VM {name} runs on {host}, which is in Maintenance")
        for op in self.get("/v1/operations")["items"]:
            if op["status"]["phase"] not in FINISHED:
                bad.append(f"operation {op['metadata']['name']} never ended: {op['status']['phase']}")
        for name, host in hosts.items():
            if host["status"]["resource_state"] != "Enabled":
                bad.append(
                    f"host {name} is {host['status']['resource_state']} after every maintenance was cancelled"
                )
            if host["spec"]["fenced"] or host["status"]["fence"] is not None:
                bad.append(f"host {name} is still fenced after its repair: {host['status']['fence']}")
        self.vms_final = vms

    def check_hypervisors(self) -> None:
        """What the simulated hosts themselves say, read from their state file with the server stopped."""
        from virtplane.drivers.base import domain_name
        from virtplane.drivers.sim import SimCloud

        cloud = SimCloud(state_path=self.server.data_dir / "sim.db")
        placements = cloud.snapshot_state().placements()
        cloud.close()
        bad = self.report.invariant_violations
        for domain, where in placements.items():
            if len(where) > 1:
                bad.append(f"domain {domain} runs on several hosts: {where}")
        for name, vm in self.vms_final.items():
            where = placements.get(domain_name(vm["metadata"]["uid"]), [])
            if vm["status"]["phase"] == "Running" and where != [vm["status"]["host"]]:
                bad.append(
                    f"VM {name} is Running on {vm['status']['host']} per the API, on {where} per the hosts"
                )
            if vm["status"]["phase"] == "Stopped" and where:
                bad.append(f"VM {name} is Stopped per the API but live on {where}")


def write_report(report: Report) -> None:
    directory = os.environ.get("VIRTPLANE_REPORT_DIR")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "crash-harness.json").write_text(json.dumps(asdict(report), indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=500, help="SIGKILLs to survive (default 500)")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (the seed is printed)")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(
        f"crash harness seed {seed} (replay: python -m tests.harness.crash --seed {seed} --kills {args.kills})",
        flush=True,
    )
    import tempfile

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="virtplane-harness-"))
    harness = Harness(data_dir, seed=seed, kills=args.kills)
    try:
        report = harness.run()
    finally:
        harness.server.stop()
    write_report(report)
    print(json.dumps(asdict(report), indent=2))
    return 1 if report.invariant_violations else 0


if __name__ == "__main__":
    sys.exit(main())
