"""Live migration as pre-copy over a link of limited bandwidth: one job's arithmetic.

First the local disks named in the request are copied, then memory in
iterations: the first sends all of it, each next one sends what the guest
dirtied while the previous one was on the wire. When what is left is under
``CONVERGENCE_MIB`` the guest is paused for the last copy and switched over.
A dirty rate at or above the bandwidth never converges; the migration keeps
iterating until it is aborted (the control plane's timeouts decide that).

The policy's tools, as QEMU has them: ``max_downtime_ms`` sets the switch-over
threshold to what the link sends in that time (else ``CONVERGENCE_MIB``);
``auto_converge`` throttles the guest's vCPUs after each pass that did not converge
(20 %, then 10 % more each pass, at most 99 %), which slows its dirtying as much;
``start_post_copy`` (allowed when the job was started with post-copy) stops the
dirtying altogether: the guest runs on the target and what is left of memory is sent
once. ``_migration`` runs the jobs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from virtplane.drivers.base import MigrationJob, MigrationPhase

from ._changes import Persisted, Record

if TYPE_CHECKING:
    from ._host import SimHost

CONVERGENCE_MIB = 64.0
"""Switch over once the memory left to send is below this."""

_EPSILON_MIB = 1e-6

THROTTLE_INITIAL_PCT = 20
THROTTLE_INCREMENT_PCT = 10
THROTTLE_MAX_PCT = 99
"""QEMU's defaults for auto-converge (cpu-throttle-initial, -increment, max-cpu-throttle)."""


class InjectedFault(StrEnum):
    FAIL = "fail"
    STALL = "stall"


@dataclass(frozen=True)
class DiskCopy:
    path: str
    pool: str
    volume: str
    size_gib: int
    content: str


class Migration(Record):
    """One migration's progress arithmetic; ``advance`` is pure bookkeeping with no I/O."""

    domain = Persisted[str]()
    vm_uid = Persisted[str]()
    source = Persisted["SimHost"]()
    target = Persisted["SimHost"]()
    bandwidth_mib_s = Persisted[float]()
    memory_mib = Persisted[float]()
    disks = Persisted[tuple[DiskCopy, ...]]()
    fault = Persisted[InjectedFault | None]()
    phase = Persisted[MigrationPhase]()
    error = Persisted[str]()
    processed_mib = Persisted[float]()
    disk_remaining_mib = Persisted[float]()
    iteration = Persisted[int]()  # 0 while disks are copied, then the memory pass number
    iteration_remaining_mib = Persisted[float]()
    iteration_seconds = Persisted[float]()
    stalled = Persisted[bool]()
    reserved = Persisted[tuple[int, int]]()  # vcpus, MiB held on the target
    progressed_at = Persisted[float]()  # the clock's time of the last tick (of the start before the first)
    auto_converge = Persisted[bool]()
    post_copy_allowed = Persisted[bool]()
    post_copy = Persisted[bool]()  # switched: no more dirtying, the rest of memory goes once
    max_downtime_ms = Persisted[int | None]()
    throttle_pct = Persisted[int]()
    dirty_rate_mib_s = Persisted[float]()  # the guest's dirtying in the last tick, after throttling

    def __init__(
        self,
        *,
        domain: str,
        vm_uid: str,
        source: SimHost,
        target: SimHost,
        bandwidth_mib_s: float,
        memory_mib: float,
        disks: tuple[DiskCopy, ...],
        fault: InjectedFault | None,
        auto_converge: bool = False,
        post_copy_allowed: bool = False,
        max_downtime_ms: int | None = None,
    ) -> None:
        self.domain = domain
        self.vm_uid = vm_uid
        self.source = source
        self.target = target
        self.bandwidth_mib_s = bandwidth_mib_s
        self.memory_mib = memory_mib
        self.disks = disks
        self.fault = fault
        self.disk_remaining_mib = float(sum(d.size_gib for d in disks) * 1024)
        # injected faults strike half way through the first full pass
        self.fault_point_mib = (self.disk_remaining_mib + memory_mib) / 2
        self.phase = MigrationPhase.RUNNING
        self.error = ""
        self.processed_mib = 0.0
        self.iteration = 0
        self.iteration_remaining_mib = 0.0
        self.iteration_seconds = 0.0
        self.stalled = False
        self.reserved = (0, 0)
        self.progressed_at = 0.0
        self.auto_converge = auto_converge
        self.post_copy_allowed = post_copy_allowed
        self.post_copy = False
        self.max_downtime_ms = max_downtime_ms
        self.throttle_pct = 0
        self.dirty_rate_mib_s = 0.0
        self.timer: asyncio.TimerHandle | None = None

    @property
    def remaining_mib(self) -> float:
        if self.iteration == 0:
            return self.disk_remaining_mib + self.memory_mib
        return self.iteration_remaining_mib

    def job(self) -> MigrationJob:
        remaining = self.remaining_mib if self.phase is MigrationPhase.RUNNING else 0.0
        return MigrationJob(
            domain=self.domain,
            target_uri=self.target.uri,
            phase=self.phase,
            data_total_mib=self.processed_mib + remaining,
            data_processed_mib=self.processed_mib,
            data_remaining_mib=remaining,
            iteration=self.iteration,
            error=self.error,
            memory_remaining_mib=self.memory_remaining_mib if self.phase is MigrationPhase.RUNNING else 0.0,
            dirty_rate_mib_s=self.dirty_rate_mib_s if self.phase is MigrationPhase.RUNNING else 0.0,
            throttle_pct=self.throttle_pct,
            post_copy=self.post_copy,
        )

    @property
    def memory_remaining_mib(self) -> float:
        return self.memory_mib if self.iteration == 0 else self.iteration_remaining_mib

    @property
    def switch_over_mib(self) -> float:
        """What may be left for the paused last copy: the link's worth of the allowed downtime."""
        if self.max_downtime_ms is None:
            return CONVERGENCE_MIB
        return self.bandwidth_mib_s * self.max_downtime_ms / 1000

    def at_fault_point(self) -> bool:
        return self.fault is not None and self.processed_mib >= self.fault_point_mib - _EPSILON_MIB

    def switch_to_post_copy(self) -> None:
        """From now on nothing is dirtied here; what the guest dirtied during the pass under way
        joins what is left to send."""
        if self.post_copy:
            return
        self.post_copy = True
        if self.iteration > 0:
            dirtied = self.dirty_rate_mib_s * self.iteration_seconds
            self.iteration_remaining_mib = min(self.memory_mib, self.iteration_remaining_mib + dirtied)
        self.dirty_rate_mib_s = 0.0

    def _throttled(self, guest_rate_mib_s: float) -> float:
        self.dirty_rate_mib_s = guest_rate_mib_s * (1 - self.throttle_pct / 100)
        return self.dirty_rate_mib_s

    def advance(self, seconds: float, dirty_rate_mib_s: float) -> bool:
        """Send for ``seconds`` of simulated time; True once the switch-over is done."""
        # in post-copy the guest runs on the target: nothing is dirtied here, the pass under way is the last
        guest_rate = 0.0 if self.post_copy else dirty_rate_mib_s
        dirty_rate_mib_s = self._throttled(guest_rate)
        budget = self.bandwidth_mib_s * seconds
        while budget > 0:
            step = budget
            if self.fault is not None:
                room = self.fault_point_mib - self.processed_mib
                if room <= _EPSILON_MIB:
                    return False
                step = min(step, room)
            if self.disk_remaining_mib > 0:
                sent = min(step, self.disk_remaining_mib)
                self.disk_remaining_mib -= sent
            else:
                if self.iteration == 0:
                    self.iteration = 1
                    self.iteration_remaining_mib = self.memory_mib
                sent = min(step, self.iteration_remaining_mib)
                self.iteration_remaining_mib -= sent
                self.iteration_seconds += sent / self.bandwidth_mib_s
                if self.iteration_remaining_mib <= 0:
                    dirtied = min(self.memory_mib, dirty_rate_mib_s * self.iteration_seconds)
                    if dirtied < self.switch_over_mib:
                        # the last few dirty pages go over while the guest is paused
                        self.processed_mib += sent + dirtied
                        return True
                    self.iteration += 1
                    self.iteration_remaining_mib = dirtied
                    self.iteration_seconds = 0.0
                    if self.auto_converge:
                        self.throttle_pct = min(
                            THROTTLE_MAX_PCT,
                            self.throttle_pct + THROTTLE_INCREMENT_PCT
                            if self.throttle_pct
                            else THROTTLE_INITIAL_PCT,
                        )
                        dirty_rate_mib_s = self._throttled(guest_rate)
            self.processed_mib += sent
            budget -= sent
        return False


__all__ = ["CONVERGENCE_MIB", "DiskCopy", "InjectedFault", "Migration"]
