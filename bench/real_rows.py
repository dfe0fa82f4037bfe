"""Rows 11-14 measured on the rig (``bench/real.py`` runs them, ``bench/real_bounds.py`` divides)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tests.qemu.plane import QemuPlane

from bench import real_bounds as rb
from bench.observe import parse_time
from bench.real_rig import (
    RealRig,
    accelerator_used,
    console_count,
    control_plane,
    direct_boot_s,
    direct_migration_s,
    domain_xml,
    hosts_ready,
    loopback_mib_s,
    renamed_xml,
)
from bench.rows import Row
from bench.sizes import Sizes
from virtplane.domain.resources import Host, VirtualMachine, VirtualMachineOperation, VMPhase
from virtplane.drivers.base import domain_name

MEMORY_MIB = 192
DIRTY_MIB = 64  # what the busy guest keeps rewriting (vp.dirty), a third of its memory
LINK_COPY_MIB = 1024
LIMITS = {"outbound": 2, "inbound": 1, "per_cluster": 5}  # the migration.* settings' defaults


@dataclass
class Bounds:
    """What more than one row divides by, measured once."""

    boot_s: list[float] = field(default_factory=list)
    link_mib_s: float | None = None


def vm_body(name: str, cmdline: str = "") -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "run_policy": "AlwaysOn",
            "cpu": 1,
            "memory_mib": MEMORY_MIB,
            "boot": {
                "kernel": "guest-kernel",
                "initrd": "guest-initrd",
                "cmdline": f"console=ttyS0 panic=-1 quiet {cmdline}".strip(),
            },
        },
    }


async def api_created(qplane: QemuPlane, body: dict[str, Any]) -> VirtualMachine:
    async with qplane.api() as api:
        answer = await api.post("/v1/vms", json=body)
    if answer.status_code != 201:
        raise RuntimeError(f"POST /v1/vms: {answer.status_code} {answer.text}")
    return qplane.vm(body["metadata"]["name"])


async def deleted(qplane: QemuPlane, name: str) -> None:
    async with qplane.api() as api:
        answer = await api.delete(f"/v1/vms/{name}")
    if answer.status_code not in (200, 202, 204):
        raise RuntimeError(f"DELETE /v1/vms/{name}: {answer.status_code} {answer.text}")
    deadline = time.monotonic() + 120
    while qplane.store.find(VirtualMachine, name) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"VM {name} still there 120 s after its DELETE")
        await asyncio.sleep(0.05)


async def our_boot_s(real: RealRig, qplane: QemuPlane, name: str) -> tuple[float, str]:
    """API create of an AlwaysOn VM until GUEST-UP; the domain's XML as libvirt holds it."""
    started = time.monotonic()
    vm = await api_created(qplane, vm_body(name))
    domain = domain_name(vm.metadata.uid)
    seen = await console_count(real.console_log(domain), "GUEST-UP")
    host = qplane.vm(name).status.host or "a"
    xml = await domain_xml(real, host, domain)
    await deleted(qplane, name)
    return seen - started, xml


async def start_to_guest_up(real: RealRig, sizes: Sizes, bounds: Bounds) -> Row:
    async with control_plane(real, "row11") as qplane:
        await hosts_ready(qplane, "a")
        accelerator = accelerator_used(qplane, "a")
        ours: list[float] = []
        for i in range(sizes.real_boots):  # in turn, so that the machine's drift reaches both
            took, xml = await our_boot_s(real, qplane, f"boot-{i}")
            ours.append(took)
            bounds.boot_s.append(await direct_boot_s(real, xml, f"direct-boot-{i}"))
    return rb.start_row(ours, bounds.boot_s, accelerator)


async def migrated_s(qplane: QemuPlane, vm: str, target: str, label: str) -> float:
    """A Migrate operation from its POST until Completed (the VM running on ``target``)."""
    name = f"{vm}-migrate-{label}"
    body = {
        "kind": "VirtualMachineOperation",
        "metadata": {"name": name},
        "spec": {"vm": vm, "type": "Migrate", "migrate": {"target_host": target}},
    }
    async with qplane.api() as api:
        started = time.monotonic()
        answer = await api.post("/v1/operations", json=body)
        if answer.status_code != 201:
            raise RuntimeError(f"POST /v1/operations: {answer.status_code} {answer.text}")
        while True:
            phase = _op_phase(qplane, name)
            if phase in ("Completed", "Failed", "Superseded"):
                took = time.monotonic() - started
                break
            if time.monotonic() - started > 300:
                raise TimeoutError(f"migration of {vm} not finished after 300 s")
            await asyncio.sleep(0.02)
    if phase != "Completed":
        raise RuntimeError(f"migration of {vm} to {target}: {phase}")
    await qplane.wait_settled(vm, VMPhase.RUNNING)  # its status catches up: the next one may start
    return took


def _op_phase(qplane: QemuPlane, name: str) -> str:
    return str(qplane.store.get(VirtualMachineOperation, name).status.phase.value)


async def paused_clone(real: RealRig, xml: str, name: str, ready: str) -> None:
    """The guest of ``xml`` under another name, booted on a by libvirt alone until ``ready``
    shows, then paused: what ``direct_migration_s`` moves as the bound."""
    log = real.console_log(name)
    log.unlink(missing_ok=True)
    conn = await asyncio.to_thread(real.conn, "a")
    try:
        dom = await asyncio.to_thread(conn.defineXML, renamed_xml(xml, name, log))
        await asyncio.to_thread(dom.create)
        await console_count(log, ready)
        await asyncio.to_thread(dom.suspend)
    finally:
        await asyncio.to_thread(conn.close)


async def gone(real: RealRig, name: str) -> None:
    for driver in real.drivers.values():
        await driver.destroy(name)
        await driver.undefine(name)


def other(host: str) -> str:
    return "b" if host == "a" else "a"


async def live_migrations(real: RealRig, sizes: Sizes, bounds: Bounds, rows: frozenset[int]) -> list[Row]:
    bounds.link_mib_s = await asyncio.to_thread(loopback_mib_s, LINK_COPY_MIB)
    found: list[Row] = []
    async with control_plane(real, "row12") as qplane:
        await hosts_ready(qplane, "a", "b")
        accelerator = accelerator_used(qplane, "a")
        for number, name, cmdline, ready in (
            (12, "idle", "", "TICK 1"),
            (13, "busy", f"vp.dirty={DIRTY_MIB}", "TICK 3"),  # its pages rewritten at least once
        ):
            if number not in rows:
                continue
            vm = await api_created(qplane, vm_body(name, cmdline))
            domain = domain_name(vm.metadata.uid)
            await console_count(real.console_log(domain), ready)
            where = qplane.vm(name).status.host or "a"
            xml = await domain_xml(real, where, domain)
            clone = f"paused-{name}"
            await paused_clone(real, xml, clone, ready)
            # One of each untimed first: a session's first migrations each way take up to twice
            # as long (the daemons' first incoming QEMU), then ours and libvirt's in turn, each
            # first every other time, so that neither always follows the other's clean-up.
            await migrated_s(qplane, name, other(where), "warm-up")
            where = other(where)
            await direct_migration_s(real, clone, "a", "b")
            clone_on = "b"
            ours: list[float] = []
            paused: list[float] = []
            for i in range(sizes.real_migrations):
                for step in ("ours", "paused") if i % 2 == 0 else ("paused", "ours"):
                    if step == "ours":
                        ours.append(await migrated_s(qplane, name, other(where), str(i)))
                        where = other(where)
                    else:
                        paused.append(await direct_migration_s(real, clone, clone_on, other(clone_on)))
                        clone_on = other(clone_on)
            await gone(real, clone)
            found.append(
                rb.migration_row(
                    number,
                    f"an {name} guest" if name == "idle" else f"a guest rewriting {DIRTY_MIB} MiB",
                    ours,
                    paused,
                    MEMORY_MIB,
                    bounds.link_mib_s,
                    accelerator,
                )
            )
            await deleted(qplane, name)
    return found


async def drain(real: RealRig, sizes: Sizes) -> Row:
    async with control_plane(real, "row14") as qplane:
        await qplane.add_host("a")
        await qplane.add_host("b", enabled=False)  # every guest starts on a
        await hosts_ready(qplane)
        accelerator = accelerator_used(qplane, "a")
        names = [f"drain-{i}" for i in range(sizes.real_drain_vms)]
        domains = [domain_name((await api_created(qplane, vm_body(name))).metadata.uid) for name in names]
        for domain in domains:
            await console_count(real.console_log(domain), "TICK 1")
        xml = await domain_xml(real, "a", domains[0])
        # the guests' bound, measured while they run (the machine's load as in the drain): one of
        # them cloned and paused, migrated once untimed, then back and forth
        await paused_clone(real, xml, "paused-drain", "TICK 1")
        await direct_migration_s(real, "paused-drain", "a", "b")
        paused, clone_on = [], "b"
        for _ in range(sizes.real_migrations):
            paused.append(await direct_migration_s(real, "paused-drain", clone_on, other(clone_on)))
            clone_on = other(clone_on)
        await gone(real, "paused-drain")
        qplane.store.mutate(Host, "b", lambda h: setattr(h.spec, "enabled", True))
        while qplane.host_state("b") != "Enabled":
            await asyncio.sleep(0.05)
        async with qplane.api() as api:
            answer = await api.post("/v1/hosts/a/maintenance", json={"strategy": "Migration"})
            if answer.status_code != 200:
                raise RuntimeError(f"POST maintenance: {answer.status_code} {answer.text}")
            deadline = time.monotonic() + 600
            while True:
                shown = (await api.get("/v1/hosts/a/maintenance")).json()
                if shown["phase"] in ("Completed", "Failed") or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
        if shown["phase"] != "Completed":
            raise RuntimeError(f"the drain ended {shown['phase']}: {shown.get('message', '')}")
        makespan = parse_time(shown["finished_at"]) - parse_time(shown["started_at"])
        flights = in_flight(qplane, names, parse_time(shown["started_at"]))
    per_vm = dict.fromkeys(names, rb.median(paused) or 0.0)
    row = rb.drain_row(makespan, per_vm, 1, LIMITS, accelerator)
    row.details["migrations_s_after_start"] = flights  # where the makespan went: each in flight
    row.details["in_flight_s"] = round(sum(end - begin for begin, end in flights.values()), 2)
    row.details["libvirt_paused_s"] = [round(t, 3) for t in paused]
    return row


def in_flight(qplane: QemuPlane, names: list[str], started: float) -> dict[str, tuple[float, float]]:
    """Each VM's MigrationStarted and Migrated events, in seconds after the drain's start."""
    found: dict[str, tuple[float, float]] = {}
    for name in names:
        times = {
            e.reason: e.time.timestamp() - started
            for e in qplane.store.list_events(kind="VirtualMachine", name=name)
            if e.time is not None
        }
        if "MigrationStarted" in times and "Migrated" in times:
            found[name] = (round(times["MigrationStarted"], 2), round(times["Migrated"], 2))
    return found
