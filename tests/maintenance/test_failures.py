"""Failed, stalled and non-converging migrations; concurrency limits; placement; dry runs."""

from __future__ import annotations

from tests.conftest import eventually
from tests.maintenance.conftest import Cluster, most_at_once
from virtplane.controllers.maintenance.tracking import MaintenanceRun, Tracker
from virtplane.domain.host_states import HostEvent
from virtplane.domain.intents import read_migration
from virtplane.domain.resources import (
    Host,
    HostMaintenance,
    HostMaintenanceSpec,
    MaintenancePhase,
    Metadata,
    Resource,
    VirtualMachine,
    VMPhase,
)
from virtplane.drivers.base import MigrationPhase


async def three_hosts(cluster: Cluster, vms: int = 1, memory_mib: int = 1024) -> None:
    await cluster.add_host("h1")
    for i in range(vms):
        await cluster.add_vm(f"v{i}", memory_mib=memory_mib)
    await cluster.add_host("h2")
    await cluster.add_host("h3")


async def test_a_failed_migration_is_retried_elsewhere_and_the_vm_never_stops(cluster: Cluster) -> None:
    await three_hosts(cluster)
    cluster.fault("h1", "fail-migration", "v0", count=1)
    guest = cluster.sim.read_memory(cluster.domain("v0"))
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    progress = cluster.maintenance("h1").status.progress["v0"]
    assert progress.attempts == 2 and len(set(progress.tried)) == 2
    assert cluster.vm("v0").status.host == progress.tried[1]
    assert cluster.sim.read_memory(cluster.domain("v0")) == guest, "never stopped: the same guest memory"
    outcomes = [t.outcome for t in cluster.sim.migration_record() if not t.started]
    assert outcomes == [MigrationPhase.FAILED, MigrationPhase.COMPLETED], "the retry is a second migration"
    assert "Exited" not in cluster.events("VirtualMachine", "v0")
    assert "MigrationFailed" in cluster.events("VirtualMachine", "v0")
    host_events = cluster.events("Host", "h1")
    assert "ErrorInPrepareForMaintenance" in host_events and host_events[-1] == "Maintenance"


async def test_when_every_target_fails_the_host_is_in_error_and_the_vm_runs_on(cluster: Cluster) -> None:
    await three_hosts(cluster)
    cluster.fault("h1", "fail-migration", "v0", count=2)
    cluster.request("h1")
    await cluster.wait_state("h1", "ErrorInMaintenance")
    m = cluster.maintenance("h1")
    assert m.status.blocking == ["v0"] and m.status.progress["v0"].state == "Failed"
    assert "no target host" in m.status.progress["v0"].message
    assert cluster.settled("v0", "h1")
    # asking again retries; the faults are used up now
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    assert cluster.vm("v0").status.host in ("h2", "h3")


async def test_a_migration_that_does_not_converge_is_aborted(cluster: Cluster) -> None:
    await three_hosts(cluster)
    cluster.plane.settings.set("migration.completion_timeout_per_gib_s", 1)
    cluster.plane.settings.set("migration.max_attempts", 1)
    cluster.sim.set_dirty_rate(cluster.domain("v0"), 5000)  # above the 1000 MiB/s link
    cluster.request("h1")
    await cluster.wait_state("h1", "ErrorInMaintenance")
    assert "MigrationAborting" in cluster.events("VirtualMachine", "v0")
    assert "completion timeout" in cluster.maintenance("h1").status.progress["v0"].message
    assert cluster.settled("v0", "h1")


async def test_a_stalled_migration_is_aborted_after_the_progress_timeout(cluster: Cluster) -> None:
    await three_hosts(cluster)
    cluster.plane.settings.set("migration.progress_timeout_s", 1)
    cluster.fault("h1", "stall-migration", "v0", count=1)
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    messages = [e.message for e in cluster.store.list_events(kind="VirtualMachine", name="v0")]
    assert any("no progress for 1s" in m for m in messages)
    assert cluster.maintenance("h1").status.progress["v0"].attempts == 2


async def test_concurrency_limits_are_never_exceeded(cluster: Cluster) -> None:
    await cluster.add_host("h1", memory_mib=65536)
    for i in range(6):
        await cluster.add_vm(f"v{i}", memory_mib=2048)
    for host in ("h2", "h3", "h4"):
        await cluster.add_host(host)
    cluster.plane.settings.set("migration.bandwidth_mib_s", 400)  # ~0.5 s each: they overlap
    waiting: set[str] = set()

    def note_waiting() -> bool:
        m = cluster.store.find(HostMaintenance, "h1")
        for p in m.status.progress.values() if m else ():
            if p.state == "WaitingForSlot":
                waiting.add(p.message)
        return cluster.state("h1") == "Maintenance"

    cluster.request("h1")
    await eventually(note_waiting, timeout=20, interval=0.005)
    record = cluster.sim.migration_record()
    assert len(record) == 2 * 6, "one migration per VM, each started and ended"
    assert most_at_once(record, lambda t: t.source) == 2, "outbound per host, reached and never exceeded"
    assert most_at_once(record, lambda t: t.target) == 1, "inbound per host"
    assert "waiting for a migration slot: 2/2 outbound from h1" in waiting
    assert all(cluster.vm(f"v{i}").status.host != "h1" for i in range(6))


async def test_the_inbound_limit_holds_when_one_host_takes_every_vm(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    for i in range(4):
        await cluster.add_vm(f"v{i}")
    await cluster.add_host("h2", memory_mib=65536)
    cluster.plane.settings.set("migration.bandwidth_mib_s", 400)
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance", timeout=20)
    record = cluster.sim.migration_record()
    assert len(record) == 2 * 4 and {t.target for t in record} == {"h2"}
    assert most_at_once(record, lambda t: t.target) == 1, "one inbound migration at a time"


async def test_the_cluster_limit_holds(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    for i in range(3):
        await cluster.add_vm(f"v{i}")
    for host in ("h2", "h3", "h4"):
        await cluster.add_host(host)
    cluster.plane.settings.set("migration.max_per_cluster", 1)
    cluster.plane.settings.set("migration.max_inbound_per_host", 5)
    cluster.plane.settings.set("migration.bandwidth_mib_s", 400)
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance", timeout=20)
    record = cluster.sim.migration_record()
    assert len(record) == 2 * 3
    assert most_at_once(record, lambda t: "cluster") == 1


async def test_no_vm_lands_on_a_disabled_full_or_maintenance_host(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    for i in range(3):
        await cluster.add_vm(f"v{i}")
    await cluster.add_host("h2")
    await cluster.add_host("h3", memory_mib=1024)  # room for nothing once one VM is there
    await cluster.add_host("h4")
    await cluster.add_vm("filler", memory_mib=1024)  # lands on h2 or h4: they have the most room
    from virtplane.domain.resources import Host

    def disable(host: Host) -> None:
        host.spec.enabled = False

    cluster.store.mutate(Host, "h2", disable)
    await cluster.wait_state("h2", "Disabled")
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    for i in range(3):
        assert cluster.vm(f"v{i}").status.host in ("h3", "h4")
    targets = {t.target for t in cluster.sim.migration_record()}
    assert targets <= {"h3", "h4"}, "a disabled host receives no VM, not even for a while"
    assert sum(cluster.vm(f"v{i}").status.host == "h3" for i in range(3)) <= 1, "h3 had room for one"
    # a new VM never starts on the host in maintenance
    await cluster.add_vm("late")
    assert cluster.vm("late").status.host not in ("h1", "h2")


async def test_no_room_anywhere_blocks_before_anything_moves(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("big", memory_mib=8192)
    await cluster.add_vm("small", memory_mib=512)
    await cluster.add_host("h2", memory_mib=4096)
    view = cluster.request("h1")
    actions = {i["vm"]: i["action"] for i in view["plan"]["items"]}
    assert actions == {"big": "Blocked", "small": "Migrate"}
    await cluster.wait_state("h1", "ErrorInMaintenance")
    assert cluster.settled("small", "h1") and cluster.settled("big", "h1")
    assert "not enough memory" in cluster.maintenance("h1").status.message


async def test_a_dry_run_changes_nothing(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("s")
    await cluster.add_vm("l", pool="h1-local")
    await cluster.add_host("h2")
    versions = {
        (kind, o.metadata.name): o.metadata.resource_version
        for kind, objs in (
            ("vm", cluster.store.list_objects(type(cluster.vm("s")))),
            ("host", [cluster.host("h1"), cluster.host("h2")]),
        )
        for o in objs
    }
    sim_before = cluster.sim.snapshot_state()
    view = cluster.request("h1", "Migration", dry_run=True)
    assert view["phase"] == "Planned" and view["dry_run"] is True
    assert {i["vm"]: (i["action"], i["target"]) for i in view["plan"]["items"]} == {
        "s": ("Migrate", "h2"),
        "l": ("MigrateWithStorage", "h2"),
    }
    assert cluster.store.find(HostMaintenance, "h1") is None
    for (kind, name), version in versions.items():
        current = cluster.vm(name) if kind == "vm" else cluster.host(name)
        assert current.metadata.resource_version == version
    assert cluster.sim.snapshot_state() == sim_before
    assert cluster.state("h1") == "Enabled" and cluster.vm("s").status.phase is VMPhase.RUNNING


async def test_a_maintenance_and_its_hosts_state_are_seen_together(cluster: Cluster) -> None:
    """One transaction, from the start to the end: readers of the API saw a maintenance Failed
    beside a host still in PrepareForMaintenance, and a host in ErrorInMaintenance beside its
    maintenance's last progress, still Migrating. Recorded as each change is committed: what the
    store then holds of the other."""
    await three_hosts(cluster)
    cluster.fault("h1", "fail-migration", "v0", count=2)
    seen: list[tuple[str, str, str]] = []
    ends = (MaintenancePhase.COMPLETED, MaintenancePhase.FAILED)
    end_states = ("Maintenance", "ErrorInMaintenance")

    def on_change(kind: str, name: str, old: Resource | None, new: Resource | None) -> None:
        if isinstance(new, HostMaintenance):
            before = old if isinstance(old, HostMaintenance) else None
            taken_up = new.status.observed_generation == new.metadata.generation
            if taken_up and (before is None or before.status.observed_generation != new.metadata.generation):
                seen.append(("taken up", new.status.phase.value, cluster.state(name)))
            if new.status.phase in ends and (before is None or before.status.phase != new.status.phase):
                seen.append(("maintenance", new.status.phase.value, cluster.state(name)))
        if isinstance(new, Host) and new.status.resource_state.value in end_states:
            state_before = old.status.resource_state if isinstance(old, Host) else None
            if state_before != new.status.resource_state:
                phase = cluster.maintenance(name).status.phase.value
                seen.append(("host", phase, new.status.resource_state.value))

    cluster.plane.cache.add_listener(on_change)
    cluster.request("h1")
    await eventually(lambda: len(seen) == 3)
    cluster.request("h1")  # again: the faults are used up, it drains
    await eventually(lambda: len(seen) == 6)
    assert seen[0] == ("taken up", "Draining", "PrepareForMaintenance")
    assert sorted(seen[1:3]) == [
        ("host", "Failed", "ErrorInMaintenance"),
        ("maintenance", "Failed", "ErrorInMaintenance"),
    ]
    assert seen[3] == ("taken up", "Draining", "PrepareForMaintenance")
    assert sorted(seen[4:]) == [
        ("host", "Completed", "Maintenance"),
        ("maintenance", "Completed", "Maintenance"),
    ]


async def test_whoever_sees_a_migration_end_on_its_vm_sees_its_event(cluster: Cluster) -> None:
    """The VM's write that ends a migration (back where it ran, or on its target) carries the
    event that says so: recorded, at each such write's commit, the VM's last event."""
    await three_hosts(cluster)
    cluster.fault("h1", "fail-migration", "v0", count=1)
    seen: list[str] = []

    def on_change(kind: str, name: str, old: Resource | None, new: Resource | None) -> None:
        if not isinstance(old, VirtualMachine) or not isinstance(new, VirtualMachine):
            return
        if read_migration(old.metadata.annotations) and not read_migration(new.metadata.annotations):
            seen.append(cluster.events(kind, name)[-1])

    cluster.plane.cache.add_listener(on_change)
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    assert seen == ["MigrationFailed", "Migrated"]


async def test_a_host_state_is_written_with_its_event(cluster: Cluster) -> None:
    """Whoever sees the host's new state sees its event too: one transaction, not the state now
    and the event with the reconcile's next write (a test saw Maintenance without its event)."""
    await cluster.add_host("h1")
    await cluster.wait_state("h1", "Enabled")
    ctx = cluster.plane.ctx
    async with ctx.events_scope():
        run = MaintenanceRun(
            HostMaintenance(metadata=Metadata(name="h1"), spec=HostMaintenanceSpec(host="h1")),
            cluster.store.get(Host, "h1"),
            asked=True,
        )
        await Tracker(ctx, cluster.plane.migrations)._transition(
            run, HostEvent.ASK_MAINTENANCE, "asked", "maintenance.planned"
        )
        assert cluster.state("h1") == "PrepareForMaintenance"
        assert cluster.events("Host", "h1")[-1] == "PrepareForMaintenance"
