"""Leader election over the store's lease table, on SQLite and PostgreSQL (see conftest).

Each elector gets a Store of its own on the same database, as two replicas would. Time
is a fake wall clock that moves only when a test says so.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta

import pytest

from tests.conftest import WallClock, eventually
from virtplane.runtime.leader import LeaderElector
from virtplane.store import Store

LEASE = "controller/VirtualMachine"


@pytest.fixture
def replica(store: Store) -> Iterator[Store]:
    """A second Store on the same database: another control-plane replica."""
    other = Store(store.url)
    yield other
    other.close()


@pytest.fixture
def clock() -> WallClock:
    return WallClock()


def test_of_two_electors_exactly_one_leads(store: Store, replica: Store, clock: WallClock) -> None:
    a = LeaderElector(store, LEASE, "a", clock=clock)
    b = LeaderElector(replica, LEASE, "b", clock=clock)
    assert a.acquire_or_renew() is True
    assert b.acquire_or_renew() is False
    assert a.acquire_or_renew() is True  # renewing its own lease
    assert (a.is_leader, b.is_leader) == (True, False)
    lease = replica.lease(LEASE)
    assert lease is not None and lease[0] == "a"
    assert lease[1] == clock.now + timedelta(seconds=15)


def test_leases_of_different_names_are_independent(store: Store, replica: Store, clock: WallClock) -> None:
    assert LeaderElector(store, "controller/Host", "a", clock=clock).acquire_or_renew()
    assert LeaderElector(replica, "controller/Volume", "b", clock=clock).acquire_or_renew()


def test_a_leader_that_stops_renewing_is_replaced_only_after_expiry(
    store: Store, replica: Store, clock: WallClock
) -> None:
    a = LeaderElector(store, LEASE, "a", lease_s=15, renew_every_s=5, clock=clock)
    b = LeaderElector(replica, LEASE, "b", lease_s=15, renew_every_s=5, clock=clock)
    assert a.acquire_or_renew()
    clock.advance(9.9)
    assert a.is_leader
    assert not b.acquire_or_renew()
    # One renewal period before the lease runs out, a stops acting on its own...
    clock.advance(0.1)
    assert not a.is_leader
    # ...but the lease is still a's, so b must wait for it to expire.
    assert not b.acquire_or_renew()
    clock.advance(5.0)  # exactly at expiry: not yet free
    assert not b.acquire_or_renew()
    clock.advance(0.001)
    assert b.acquire_or_renew()
    assert b.is_leader
    assert not a.acquire_or_renew()  # a came back late: the lease is b's now
    assert not a.is_leader
    lease = store.lease(LEASE)
    assert lease is not None and lease[0] == "b"


def test_renewing_keeps_the_lease_past_its_first_expiry(
    store: Store, replica: Store, clock: WallClock
) -> None:
    a = LeaderElector(store, LEASE, "a", clock=clock)
    b = LeaderElector(replica, LEASE, "b", clock=clock)
    assert a.acquire_or_renew()
    for _ in range(5):
        clock.advance(5)
        assert a.acquire_or_renew()
        assert not b.acquire_or_renew()
    assert a.is_leader


def test_release_hands_over_at_once(store: Store, replica: Store, clock: WallClock) -> None:
    a = LeaderElector(store, LEASE, "a", clock=clock)
    b = LeaderElector(replica, LEASE, "b", clock=clock)
    assert a.acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.acquire_or_renew()
    a.release()  # not a's any more: releasing it again changes nothing
    lease = store.lease(LEASE)
    assert lease is not None and lease[0] == "b"


@pytest.mark.parametrize("expired_holder", [False, True], ids=["free", "expired"])
def test_racing_replicas_never_both_win(
    store: Store, replica: Store, clock: WallClock, expired_holder: bool
) -> None:
    if expired_holder:
        assert store.try_acquire_lease(LEASE, "gone", clock.now - timedelta(seconds=60), 15)
    stores = [store, replica]
    electors = [LeaderElector(stores[i % 2], LEASE, f"r{i}", clock=clock) for i in range(8)]
    barrier = threading.Barrier(len(electors))
    won: list[str] = []

    def campaign(elector: LeaderElector) -> None:
        barrier.wait()
        if elector.acquire_or_renew():
            won.append(elector.holder_id)

    threads = [threading.Thread(target=campaign, args=(e,)) for e in electors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    lease = store.lease(LEASE)
    assert lease is not None and lease[0] == won[0]


def test_renew_period_must_be_shorter_than_the_lease(store: Store) -> None:
    with pytest.raises(ValueError, match="renew_every_s"):
        LeaderElector(store, LEASE, "a", lease_s=5, renew_every_s=5)


async def test_run_starts_the_leader_only_and_stop_hands_over(
    store: Store, replica: Store, clock: WallClock
) -> None:
    calls: list[str] = []

    def callbacks(who: str) -> tuple[Callable[[], Awaitable[None]], Callable[[], None]]:
        async def on_start() -> None:
            calls.append(f"{who} start")

        def on_stop() -> None:  # plain functions work too
            calls.append(f"{who} stop")

        return on_start, on_stop

    a = LeaderElector(store, LEASE, "a", lease_s=15, renew_every_s=0.01, clock=clock)
    b = LeaderElector(replica, LEASE, "b", lease_s=15, renew_every_s=0.01, clock=clock)
    a_task = asyncio.create_task(a.run(*callbacks("a")))
    await eventually(lambda: a.is_leader)
    b_task = asyncio.create_task(b.run(*callbacks("b")))
    seen = b.attempts
    await eventually(lambda: b.attempts >= seen + 3 and a.attempts >= 3)
    assert not b.is_leader
    assert calls == ["a start"]

    a.stop()
    await a_task
    # a stopped acting before anyone else started (b may start as soon as a released).
    assert calls[:2] == ["a start", "a stop"]
    # No clock advance: the released lease is free at once.
    await eventually(lambda: b.is_leader)
    await eventually(lambda: calls[-1] == "b start")
    b.stop()
    await b_task
    assert calls == ["a start", "a stop", "b start", "b stop"]
    assert store.lease(LEASE) is None


async def test_a_leader_that_cannot_renew_stops_before_its_lease_expires(
    store: Store, replica: Store, clock: WallClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    lease_when_a_stopped: list[tuple[str, datetime] | None] = []
    now_when_a_stopped: list[datetime] = []

    def a_stopped() -> None:
        calls.append("a stop")
        lease_when_a_stopped.append(replica.lease(LEASE))
        now_when_a_stopped.append(clock())

    a = LeaderElector(store, LEASE, "a", lease_s=15, renew_every_s=0.1, clock=clock)
    b = LeaderElector(replica, LEASE, "b", lease_s=15, renew_every_s=0.1, clock=clock)
    a_task = asyncio.create_task(a.run(lambda: calls.append("a start"), a_stopped))
    await eventually(lambda: a.is_leader)
    b_task = asyncio.create_task(b.run(lambda: calls.append("b start"), lambda: calls.append("b stop")))
    await eventually(lambda: b.attempts >= 1)

    def unreachable(*_args: object) -> bool:
        raise ConnectionError("database unreachable")

    monkeypatch.setattr(store, "try_acquire_lease", unreachable)
    clock.advance(15 - 0.1)  # a's last renewal was at most here - 15 s ago: it must stop now
    await eventually(lambda: "a stop" in calls)
    assert not a.is_leader
    # It stopped while its lease was still valid: nobody else could have started yet.
    held = lease_when_a_stopped[0]
    assert held is not None and held[0] == "a" and now_when_a_stopped[0] < held[1]
    seen = b.attempts
    await eventually(lambda: b.attempts >= seen + 2)
    assert not b.is_leader and "b start" not in calls

    clock.advance(0.1 + 0.001)  # past the expiry
    await eventually(lambda: "b start" in calls)
    assert calls == ["a start", "a stop", "b start"]
    for elector in (a, b):
        elector.stop()
    await asyncio.gather(a_task, b_task)
    assert calls == ["a start", "a stop", "b start", "b stop"]
