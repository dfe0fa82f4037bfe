"""How big each row is: the issue's sizes, and the short mode's (CI: a couple of minutes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    name: str
    ceiling_s: float = 3.0
    api_seconds: float = 10.0  # row 1: how long each client count writes
    single_ops: int = 20  # row 4: operations of each type
    bulk_vms: int = 1000  # row 3
    fleet_vms: int = 10_000  # rows 2, 5, 7, 8
    fleet_hosts: int = 500
    crashes: int = 30  # row 5
    idle_s: float = 120.0  # row 7: two resync periods, four heartbeats
    pages: int = 20  # row 8
    drain_vms: int = 40  # row 6
    soak_days: int = 90  # row 9: simulated days, each of 24 ticks of an hour
    soak_creates_per_tick: int = 8  # VMs created a tick, and as many deleted
    soak_status_per_tick: int = 24  # status writes a tick
    cli_runs: int = 20  # row 10: launches of each command
    real_boots: int = 5  # row 11: boots of each kind (ours, libvirt's own), in turn
    real_migrations: int = 5  # rows 12, 13: migrations of each kind, back and forth, in turn
    real_drain_vms: int = 4  # row 14: real guests of 192 MiB on the drained host
    real_failover_defaults: bool = True  # row 16: a host failure with the default settings (minutes)
    selected: frozenset[int] | None = None
    """The rows of a session that were asked for (None: all); set by ``bench.__main__``."""


FULL = Sizes("full")
SHORT = Sizes(
    "short",
    ceiling_s=1.0,
    api_seconds=3.0,
    single_ops=8,
    bulk_vms=100,
    fleet_vms=500,
    fleet_hosts=25,
    crashes=8,
    idle_s=10.0,
    pages=5,
    drain_vms=10,
    soak_days=10,
    soak_creates_per_tick=4,
    soak_status_per_tick=12,
    cli_runs=5,
    real_boots=3,
    real_migrations=3,
    real_drain_vms=3,
    real_failover_defaults=False,
)
