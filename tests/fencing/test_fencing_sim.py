"""Host failure on the simulator (issue 15): detect, fence through the (simulated) BMC, recover once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import WallClock, eventually
from tests.fencing.conftest import FencedCluster, HeldBoots, on_every_write
from tests.reconciles import reconciled
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.intents import read_intents
from virtplane.domain.resources import (
    ExitReason,
    FencePhase,
    Host,
    HostConnection,
    Resource,
    RunPolicy,
    VirtualMachine,
    VMPhase,
)
from virtplane.drivers.base import MigrationRequest
from virtplane.fencing.sim import BmcFault

ON, OFF, MANUAL, AOUSM = (
    RunPolicy.ALWAYS_ON,
    RunPolicy.ALWAYS_OFF,
    RunPolicy.MANUAL,
    RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
)


async def _fleet(cluster: FencedCluster) -> None:
    """h1 (with a BMC) runs a VM of every policy on shared storage and one on its local pool; h2 is empty."""
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_vm("aousm", policy=AOUSM)
    await cluster.add_vm("manual", policy=ON)
    cluster.store.mutate(VirtualMachine, "manual", lambda v: setattr(v.spec, "run_policy", MANUAL))
    await cluster.add_vm("off", policy=ON, running=False)  # ran on h1, then AlwaysOff
    await cluster.add_vm("local", policy=ON, pool="h1-local")
    await cluster.add_host("h2")


def _reason(cluster: FencedCluster, vm: str) -> str | None:
    condition = get_condition(cluster.vm(vm).status.conditions, VMCondition.HOST_REACHABLE)
    return condition.reason if condition else None


async def test_host_down_every_policy_and_storage(
    cluster: FencedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fleet(cluster)
    stays_stopped: list[VirtualMachine] = []  # every write of the VMs that must not start elsewhere

    def record(obj: Resource) -> None:
        if isinstance(obj, VirtualMachine) and obj.metadata.name in ("manual", "off"):
            stays_stopped.append(obj.model_copy(deep=True))

    on_every_write(monkeypatch, cluster.store, record)
    cluster.fault("h1", "host-down")
    await eventually(lambda: cluster.host("h1").spec.fenced)
    assert set(cluster.bmcs.credentials) == {("root", "pw")}, (
        "the password sealed at rest, opened for the BMC"
    )
    host = cluster.host("h1")
    assert host.status.connection is HostConnection.DOWN
    assert host.status.message == f"cannot reach {host.spec.uri}: the host is down", "its URI once"
    assert host.status.fence is not None and host.status.fence.phase is FencePhase.FENCED
    for name in ("on", "aousm"):  # must run: elsewhere, once
        await eventually(lambda name=name: cluster.settled(name, "h2"))  # type: ignore[misc]
        assert "Recovered" in cluster.events("VirtualMachine", name)
        assert read_intents(cluster.vm(name).metadata.annotations).recovery is None
    await eventually(lambda: "HostFenced" in cluster.events("VirtualMachine", "manual"))
    released = [e.message for e in cluster.store.list_events(kind="VirtualMachine", name="manual")]
    assert "host h1 is fenced: the VM is released from it, it stays stopped" in released, released
    await reconciled(cluster.plane, "manual")  # a look after the release: it stays stopped
    manual = cluster.vm("manual")
    assert manual.status.phase is VMPhase.STOPPED and manual.status.last_exit is ExitReason.HOST_FAILURE
    assert manual.status.host is None and cluster.runs_on("manual") == []
    recovering = [w.metadata.name for w in stays_stopped if read_intents(w.metadata.annotations).recovery]
    assert recovering == [], "a Manual or AlwaysOff VM never waits for a recovery slot"
    off = cluster.vm("off")
    assert off.status.phase is VMPhase.STOPPED and cluster.runs_on("off") == []
    await eventually(lambda: _reason(cluster, "local") == "WaitingForHost")
    assert cluster.vm("local").status.host == "h1", "a VM on local storage waits for its host"

    # The host comes back: the domains of the VMs that left are destroyed, never started; it
    # takes no VM until an admin clears the fence.
    cluster.fault("h1", "host-up")
    await eventually(lambda: cluster.host_events("h1").count("StaleDomainRemoved") >= 4)
    for name in ("on", "aousm"):
        assert cluster.runs_on(name) == ["h2"], "never on two hosts"
    assert cluster.runs_on("local") == [], "still fenced: nothing starts on it"
    cluster.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", False))
    await eventually(lambda: cluster.settled("local", "h1"), timeout=15)
    assert cluster.host("h1").status.fence is None


async def test_a_bmc_that_times_out_then_answers(cluster: FencedCluster) -> None:
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_host("h2")
    cluster.bmcs.inject("h1", BmcFault.TIMEOUT, count=3)
    cluster.fault("h1", "host-down")
    await eventually(lambda: cluster.host("h1").spec.fenced)
    failures = [e for e in cluster.store.list_events(kind="Host", name="h1") if e.reason == "FenceFailed"]
    assert len(failures) == 3 and all("did not answer" in e.message for e in failures)
    await eventually(lambda: cluster.settled("on", "h2"))


async def test_wrong_credentials_leave_the_vms_waiting_with_the_reason(cluster: FencedCluster) -> None:
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_host("h2")
    cluster.bmcs.inject("h1", BmcFault.WRONG_CREDENTIALS, count=10_000)
    cluster.fault("h1", "host-down")
    await eventually(lambda: _reason(cluster, "on") == "BmcCredentialsRejected")
    fence = cluster.host("h1").status.fence
    assert fence is not None and fence.phase is FencePhase.RETRYING and "rejected" in fence.message
    await eventually(lambda: cluster.host_events("h1").count("FenceFailed") >= 3)
    assert cluster.vm("on").status.host == "h1" and not cluster.host("h1").spec.fenced
    assert "HostFenced" not in cluster.events("VirtualMachine", "on"), "no recovery without a confirmed Off"
    cluster.bmcs.faults.clear()  # the admin fixed the credentials
    await eventually(lambda: cluster.settled("on", "h2"))


async def test_an_unknown_system_id(cluster: FencedCluster) -> None:
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_host("h2")

    def wrong(host: Host) -> None:
        assert host.spec.fencing and host.spec.fencing.redfish
        host.spec.fencing.redfish.system_id = "no-such-system"

    cluster.store.mutate(Host, "h1", wrong)
    cluster.fault("h1", "host-down")
    await eventually(lambda: _reason(cluster, "on") == "BmcSystemNotFound")
    assert "no-such-system" in (cluster.host("h1").status.fence or cluster.host("h1").status).message
    assert cluster.vm("on").status.host == "h1"


async def test_a_flapping_host_is_not_fenced(cluster: FencedCluster) -> None:
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_host("h2")
    # The controllers' clock stands still but for the test's steps: each drop lasts 0.05 s of it,
    # under the 0.1 s after which the host counts as Disconnected, however long the machine
    # pauses; eight of them add up to more than the 0.3 s after which a silent host is fenced.
    clock = WallClock(cluster.plane.ctx.now())
    cluster.plane.ctx.now = clock
    for _ in range(8):
        cluster.fault("h1", "disconnect")
        cluster.probe("h1")
        await eventually(lambda: cluster.host("h1").status.silent_since is not None)
        clock.advance(0.05)
        cluster.fault("h1", "reconnect")
        cluster.probe("h1")
        await eventually(lambda: cluster.host("h1").status.silent_since is None)
    assert cluster.host("h1").status.connection is HostConnection.UP
    assert cluster.bmcs.calls == [], "the BMC was never asked"
    assert "Fencing" not in cluster.host_events("h1")
    assert cluster.settled("on", "h1")


async def test_partition_fenced_first_recovered_after(cluster: FencedCluster) -> None:
    """virtplane cannot reach the host, whose VMs keep running; its BMC can: the host is powered
    off (its VMs die) before any of them starts elsewhere."""
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_host("h2")
    cluster.fault("h1", "disconnect")
    cluster.probe("h1")
    await eventually(lambda: cluster.settled("on", "h2"))
    assert ("h1", "force_off") in cluster.bmcs.calls
    events = cluster.store.list_events(limit=10_000)
    fenced = next(e.id for e in events if e.kind == "Host" and e.reason == "Fenced")
    started = [e.id for e in events if e.name == "on" and e.reason == "Started"]
    assert started[-1] > fenced, "the recovery starts only after the BMC confirmed Off"
    cluster.fault("h1", "reconnect")
    cluster.fault("h1", "host-up")
    await eventually(lambda: "StaleDomainRemoved" in cluster.host_events("h1"))
    assert cluster.runs_on("on") == ["h2"]


async def test_an_off_the_bmc_does_not_confirm_is_not_an_off(cluster: FencedCluster) -> None:
    """The BMC takes ForceOff but the host stays on (partitioned, its VMs running): nothing moves."""
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_host("h2")
    cluster.bmcs.inject("h1", BmcFault.NO_CONFIRM, count=2)
    cluster.fault("h1", "disconnect")
    cluster.probe("h1")
    await eventually(lambda: cluster.host("h1").spec.fenced)
    failures = [
        e.message for e in cluster.store.list_events(kind="Host", name="h1") if e.reason == "FenceFailed"
    ]
    assert len(failures) == 2 and all("reports the host On" in m for m in failures), failures
    await eventually(lambda: cluster.settled("on", "h2"))
    assert cluster.bmcs.calls.count(("h1", "force_off")) == 3


async def test_recoveries_are_rate_limited_per_cluster_in_priority_order(
    cluster: FencedCluster, held_boots: Callable[[str], HeldBoots]
) -> None:
    """One slot: while a recovered VM boots (its boot is held until every other waiting VM has
    looked at the slots again), none of the others starts; then they go in priority order."""
    cluster.plane.settings.set("host.recovery.max_starting_per_cluster", 1)
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    priorities = {"a": 0, "b": 10, "c": 5, "d": 0, "e": 7}
    for name, priority in priorities.items():
        await cluster.add_vm(name, policy=ON, recovery_priority=priority)
    await cluster.add_host("h2", memory_mib=32768)
    boots = held_boots("h2")
    cluster.fault("h1", "host-down")

    def recovered() -> bool:
        return all(cluster.settled(name, "h2") for name in priorities)

    while not recovered():
        await eventually(lambda: boots.held or recovered())  # a recovery holds the slot while it boots
        waiting = [n for n in priorities if read_intents(cluster.vm(n).metadata.annotations).recovery]
        for name in waiting:  # each one still waiting looks at the slots again meanwhile
            await reconciled(cluster.plane, name)
        boots.release()
    assert boots.most == 1, f"{boots.most} recoveries were booting at once on h2"
    # the complete record of the recovery, in the order it was written
    record = [
        (e.reason, e.name)
        for e in cluster.store.list_events(kind="VirtualMachine", limit=10_000)
        if e.reason in ("RecoveryStarted", "Recovered")
    ]
    started = [name for reason, name in record if reason == "RecoveryStarted"]
    # one slot at a time, so the order is exact: priority first, then name
    assert started == ["b", "e", "c", "a", "d"], started
    holding, most = 0, 0
    for reason, _ in record:
        holding += 1 if reason == "RecoveryStarted" else -1
        most = max(most, holding)
    assert most == 1 and holding == 0, record


async def test_a_host_fenced_while_only_cut_off_has_its_live_stale_domains_destroyed_on_return(
    cluster: FencedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin confirms a silent host off (``spec.fenced``) while it was only cut off: its VMs
    kept running there, and the must-run one was recovered elsewhere meanwhile. When the host
    answers again, its live stale domains are destroyed and undefined before anything records
    that it answers; the VM runs on one host, the Manual one on none."""
    await cluster.add_host("h1")  # no BMC: the admin is the fence
    await cluster.add_vm("on", policy=ON)
    await cluster.add_vm("manual", policy=ON)
    cluster.store.mutate(VirtualMachine, "manual", lambda v: setattr(v.spec, "run_policy", MANUAL))
    await cluster.add_host("h2")
    cluster.fault("h1", "disconnect")
    cluster.probe("h1")
    await eventually(lambda: _reason(cluster, "on") == "WaitingForFence")
    cluster.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", True))
    await eventually(lambda: cluster.runs_on("on") == ["h1", "h2"] and cluster.vm("on").status.host == "h2")
    assert cluster.runs_on("manual") == ["h1"], "the stale copies are live: the host was only cut off"

    # Every write of h1 from now on, with where the VMs were live then. The hook runs inside the
    # store's write transaction: it reads only the simulator (a store read there could open a new
    # SQLite connection, whose set-up waits for that very transaction's lock).
    seen: list[tuple[bool, list[str], list[str]]] = []
    on_domain, manual_domain = cluster.domain("on"), cluster.domain("manual")

    def record(obj: Resource) -> None:
        if isinstance(obj, Host) and obj.metadata.name == "h1":
            answering = obj.status.silent_since is None
            state = cluster.sim.snapshot_state()
            seen.append((answering, state.active_hosts(on_domain), state.active_hosts(manual_domain)))

    on_every_write(monkeypatch, cluster.store, record)
    cluster.fault("h1", "reconnect")
    cluster.probe("h1")
    # never on two hosts
    await eventually(lambda: (cluster.runs_on("on"), cluster.runs_on("manual")) == (["h2"], []))
    await eventually(lambda: cluster.host("h1").status.silent_since is None)
    assert cluster.host_events("h1").count("StaleDomainRemoved") == 2
    defined = cluster.sim.snapshot_state().hosts["h1"].domains
    assert cluster.domain("on") not in defined and cluster.domain("manual") not in defined
    answered = [(on, manual) for answering, on, manual in seen if answering]
    assert answered, f"h1 was recorded answering again: {seen}"
    assert all(on == ["h2"] and manual == [] for on, manual in answered), seen
    manual = cluster.vm("manual")
    assert manual.status.phase is VMPhase.STOPPED and manual.status.last_exit is ExitReason.HOST_FAILURE
    assert cluster.vm("on").status.host == "h2" and cluster.settled("on", "h2")


async def test_a_fence_cleared_before_the_host_answers_does_not_leave_a_second_copy_running(
    cluster: FencedCluster,
) -> None:
    """The admin fenced a host that was only cut off, its VM was recovered on h2 (a Manual one
    released, stopped), and the admin cleared the fence before the link came back (the host is
    'repaired'): when it answers, the stale copies still running there are destroyed all the
    same; the VM whose disk is there is left alone."""
    await cluster.add_host("h1")
    await cluster.add_vm("on", policy=ON)
    await cluster.add_vm("manual", policy=ON)
    cluster.store.mutate(VirtualMachine, "manual", lambda v: setattr(v.spec, "run_policy", MANUAL))
    await cluster.add_vm("local", policy=ON, pool="h1-local")  # waits for h1: its disk is there
    await cluster.add_host("h2")
    cluster.fault("h1", "disconnect")
    cluster.probe("h1")
    await eventually(lambda: _reason(cluster, "on") == "WaitingForFence")
    cluster.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", True))
    await eventually(lambda: cluster.runs_on("on") == ["h1", "h2"] and cluster.vm("on").status.host == "h2")
    await eventually(lambda: cluster.vm("manual").status.host is None)  # released: it stays stopped
    assert cluster.runs_on("manual") == ["h1"]
    cluster.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", False))
    await reconciled(cluster.plane, "h1", kind="Host")  # the clear is seen while h1 is still silent
    assert cluster.host("h1").status.connection is HostConnection.DISCONNECTED

    cluster.fault("h1", "reconnect")
    cluster.probe("h1")
    # never on two hosts, and the Manual VM, recorded stopped, runs nowhere
    await eventually(lambda: (cluster.runs_on("on"), cluster.runs_on("manual")) == (["h2"], []))
    defined = cluster.sim.snapshot_state().hosts["h1"].domains
    assert cluster.domain("on") not in defined and cluster.domain("manual") not in defined
    assert cluster.host_events("h1").count("StaleDomainRemoved") == 2
    await eventually(lambda: cluster.settled("local", "h1"))
    assert cluster.settled("on", "h2")


async def test_a_host_back_from_a_silence_keeps_a_guest_that_moved_there_unrecorded(
    cluster: FencedCluster,
) -> None:
    """What the sweep of a returning host must never do: destroy a copy the VM's record does not
    show running elsewhere. While h2 was silent, the Manual VM's guest was moved there by hand
    (an admin's virsh migrate, no intent on the VM: the VM controller finds no domain on h1
    and, h2 being silent, cannot know where the VM is: it defines and starts nothing).
    When h2 answers, the guest keeps running with the memory it had and the VM is adopted
    there: its recorded host does not run it, so it is no stale copy."""
    await cluster.add_host("h1")
    await cluster.add_vm("manual", policy=ON)
    cluster.store.mutate(VirtualMachine, "manual", lambda v: setattr(v.spec, "run_policy", MANUAL))
    await cluster.add_host("h2")
    guest = cluster.sim.read_memory(cluster.domain("manual"))
    cluster.fault("h2", "disconnect")
    cluster.probe("h2")
    await eventually(lambda: cluster.host("h2").status.silent_since is not None)
    await cluster.sim.driver("sim://h1").migrate(
        MigrationRequest(domain=cluster.domain("manual"), target_uri="sim://h2")
    )
    await eventually(lambda: "cannot ask h2" in cluster.vm("manual").status.message)
    assert cluster.runs_on("manual") == ["h2"] and cluster.vm("manual").status.host == "h1"

    cluster.fault("h2", "reconnect")
    await reconciled(cluster.plane, "h2", kind="Host")
    await eventually(lambda: cluster.host("h2").status.silent_since is None)
    assert cluster.runs_on("manual") == ["h2"] and "StaleDomainRemoved" not in cluster.host_events("h2")
    assert cluster.sim.read_memory(cluster.domain("manual")) == guest, "the same guest, never restarted"
    await eventually(lambda: cluster.vm("manual").status.host == "h2")
