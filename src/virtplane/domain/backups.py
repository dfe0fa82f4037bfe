"""Backups' rules, pure (issue 36): what a retention policy keeps and why, whether the next
backup is full or incremental, and whether a schedule is due, waiting or missed its window.

Retention follows vzdump's and Proxmox Backup Server's ``keep-*`` options, applied in order
(last, hourly, daily, weekly, monthly, yearly), newest first: each option keeps the newest good
backup of each of its N most recent periods that have one, and a period another option already
covered is not counted again. With every option at 0 nothing is pruned. Two rules are ours,
because our incrementals are qcow2 overlays on the backup before them: a kept incremental keeps
its whole chain down to its full backup, and a failed or unfinished backup is never counted as
a good one (it is removed; the next backup starts a chain from a good one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from croniter import croniter

# How a period is named for each option, from the backup's time (UTC): two backups of one
# period share the name. Weeks are ISO weeks (Monday first), as in PBS.
PERIODS: tuple[tuple[str, Callable[[datetime], str]], ...] = (
    ("hourly", lambda t: t.strftime("%Y-%m-%d %H")),
    ("daily", lambda t: t.strftime("%Y-%m-%d")),
    ("weekly", lambda t: "{}-W{:02d}".format(*t.isocalendar()[:2])),
    ("monthly", lambda t: t.strftime("%Y-%m")),
    ("yearly", lambda t: t.strftime("%Y")),
)


@dataclass(frozen=True)
class Retention:
    keep_last: int = 0
    keep_hourly: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0
    keep_monthly: int = 0
    keep_yearly: int = 0

    def count(self, option: str) -> int:
        return int(getattr(self, f"keep_{option}"))

    @property
    def keeps_all(self) -> bool:
        return all(self.count(option) == 0 for option in ("last", *(name for name, _ in PERIODS)))


@dataclass(frozen=True)
class BackupPoint:
    """One backup of one VM, as retention sees it."""

    name: str
    taken_at: datetime
    good: bool  # finished and not failed verification: only these count
    base: str | None = None  # the backup this incremental is an overlay on; None for a full one


@dataclass(frozen=True)
class Verdict:
    name: str
    keep: bool
    reason: str


def prune(points: Sequence[BackupPoint], retention: Retention) -> list[Verdict]:
    """Each point's verdict, newest first, with the option (or chain) that keeps it."""
    newest_first = sorted(points, key=lambda p: (p.taken_at, p.name), reverse=True)
    reasons: dict[str, str] = {}
    good = [p for p in newest_first if p.good]
    if retention.keeps_all:
        reasons.update({p.name: "no keep option set: all kept" for p in good})
    else:
        for p in good[: retention.keep_last]:
            reasons[p.name] = f"keep-last {retention.keep_last}"
        for option, period_of in PERIODS:
            _keep_periods(good, option, retention.count(option), period_of, reasons)
    _keep_chains(newest_first, reasons)
    return [
        Verdict(p.name, True, reasons[p.name])
        if p.name in reasons
        else Verdict(
            p.name, False, "not good (failed or unfinished)" if not p.good else "no keep option covers it"
        )
        for p in newest_first
    ]


def _keep_periods(
    good: Sequence[BackupPoint],
    option: str,
    count: int,
    period_of: Callable[[datetime], str],
    reasons: dict[str, str],
) -> None:
    if count == 0:
        return
    covered = {period_of(p.taken_at) for p in good if p.name in reasons}
    chosen: set[str] = set()
    for p in good:
        if p.name in reasons:
            continue
        period = period_of(p.taken_at)
        if period in covered or period in chosen:
            continue
        if len(chosen) == count:
            return
        chosen.add(period)
        reasons[p.name] = f"keep-{option} {count} ({period})"


def _keep_chains(points: Sequence[BackupPoint], reasons: dict[str, str]) -> None:
    """A kept incremental is unreadable without the backups under it: keep them too."""
    by_name = {p.name: p for p in points}
    for p in points:
        if p.name not in reasons:
            continue
        base = p.base
        while base is not None and base in by_name:
            reasons.setdefault(base, f"base of {p.name}")
            base = by_name[base].base


class BackupMode(StrEnum):
    FULL = "Full"
    INCREMENTAL = "Incremental"


@dataclass(frozen=True)
class ChainState:
    """What the next backup of a VM can build on."""

    last_good: str | None  # the newest good backup (the base an incremental would overlay)
    last_checkpoint: str | None  # that backup's checkpoint name (None for a stopped VM's copy)
    checkpoint_on_host: bool  # the hypervisor still has that checkpoint (lost after some moves)
    chain_length: int  # incrementals since the last full one, counting none for the full


def next_mode(state: ChainState, max_chain: int) -> tuple[BackupMode, str]:
    """Full or incremental for the next backup, and why (the Backup's status says it)."""
    if state.last_good is None:
        return BackupMode.FULL, "full: no good backup to build on"
    if state.last_checkpoint is None:
        return BackupMode.FULL, f"full: {state.last_good} has no checkpoint (taken while the VM was stopped)"
    if not state.checkpoint_on_host:
        return BackupMode.FULL, f"full: checkpoint {state.last_checkpoint} is gone from the VM's host"
    if state.chain_length >= max_chain:
        return (
            BackupMode.FULL,
            f"full: {state.chain_length} incrementals since the last full one (limit {max_chain})",
        )
    return BackupMode.INCREMENTAL, f"incremental on {state.last_good}"


class ScheduleState(StrEnum):
    RUN = "Run"  # a fire time passed, nothing ran since, and it is within its start window
    WAIT = "Wait"  # nothing due before ``next_at``
    MISSED = "Missed"  # a fire time passed unserved beyond its start window: report it, wait


@dataclass(frozen=True)
class ScheduleDecision:
    state: ScheduleState
    fire_at: datetime | None  # the fire time served or missed (None for WAIT)
    next_at: datetime  # the next fire time after now


def valid_schedule(schedule: str) -> bool:
    """A five-field cron expression (``0 2 * * *``) or a shortcut (``@daily``, ``@weekly``)."""
    return bool(croniter.is_valid(schedule))


def schedule_due(
    schedule: str,
    *,
    last_fired: datetime | None,
    created_at: datetime,
    now: datetime,
    start_window: timedelta,
) -> ScheduleDecision:
    """Like a CronJob with a starting deadline: the newest fire time in (last served, now] runs
    if it is at most ``start_window`` old, else it is missed. Older unserved fire times collapse
    into that newest one (a backup taken now covers them), so a control plane that was down for
    a week takes one backup, not seven. Times are UTC."""
    # get_prev is strictly before its start: a microsecond on, a fire time of exactly now counts.
    newest: datetime = croniter(schedule, now + timedelta(microseconds=1)).get_prev(datetime)
    upcoming: datetime = croniter(schedule, now).get_next(datetime)
    if newest <= (last_fired or created_at):
        return ScheduleDecision(ScheduleState.WAIT, None, upcoming)
    state = ScheduleState.RUN if now - newest <= start_window else ScheduleState.MISSED
    return ScheduleDecision(state, newest, upcoming)


@dataclass(frozen=True)
class PendingBackup:
    vm: str
    host: str | None  # None for a stopped VM (copied by whichever host sees the disks)
    target: str


def admit(
    pending: Sequence[PendingBackup],
    running: Sequence[PendingBackup],
    *,
    per_host: int,
    per_target: int,
) -> list[PendingBackup]:
    """The pending backups that may start now, in their order, within the limits per host and
    per target, counting those already running (the rest wait for the next look)."""
    hosts: dict[str, int] = {}
    targets: dict[str, int] = {}
    for r in running:
        if r.host is not None:
            hosts[r.host] = hosts.get(r.host, 0) + 1
        targets[r.target] = targets.get(r.target, 0) + 1
    started: list[PendingBackup] = []
    for p in pending:
        if targets.get(p.target, 0) >= per_target:
            continue
        if p.host is not None and hosts.get(p.host, 0) >= per_host:
            continue
        started.append(p)
        targets[p.target] = targets.get(p.target, 0) + 1
        if p.host is not None:
            hosts[p.host] = hosts.get(p.host, 0) + 1
    return started
