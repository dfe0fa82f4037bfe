"""A backup policy (issue 36, an admin's): the VMs a label selector picks are backed up into a
target on a cron-like schedule, within limits per host and per target, and their backups are
pruned as vzdump's and PBS's ``keep-*`` options say (``domain.backups.prune``). Its status says
when it last ran, when it runs next, and which windows it missed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar

from pydantic import AfterValidator, BaseModel, Field

from virtplane.domain.backups import Retention, valid_schedule
from virtplane.domain.base import Condition, Name, Resource, Strict
from virtplane.domain.selectors import SelectorError, parse_label_selector

POLICY_LABEL = "virtplane.io/backup-policy"
"""On each backup a policy made: which policy's retention prunes it."""


def _check_schedule(value: str) -> str:
    if not valid_schedule(value):
        raise ValueError(f"{value!r} is not a cron schedule (five fields, e.g. '0 2 * * *', or @daily)")
    return value


def _check_selector(value: str) -> str:
    try:
        parse_label_selector(value)
    except SelectorError as exc:
        raise ValueError(f"not a label selector: {exc}") from None
    return value


Schedule = Annotated[str, Field(max_length=256), AfterValidator(_check_schedule)]
KEEP = Field(default=0, ge=0, le=10_000)


class BackupRetention(Strict):
    """As vzdump's and PBS's ``keep-*``, applied in this order; all 0 keeps every backup."""

    keep_last: int = KEEP
    keep_daily: int = KEEP
    keep_weekly: int = KEEP
    keep_monthly: int = KEEP

    def rule(self) -> Retention:
        return Retention(
            keep_last=self.keep_last,
            keep_daily=self.keep_daily,
            keep_weekly=self.keep_weekly,
            keep_monthly=self.keep_monthly,
        )


class BackupPolicySpec(Strict):
    target: Name = Field(description="The BackupTarget the backups go to.")
    schedule: Schedule = Field(
        description="When backups start: a cron expression (UTC) or @daily, @hourly..."
    )
    selector: Annotated[str, Field(max_length=4096), AfterValidator(_check_selector)] = Field(
        description="A label selector: the VMs it picks are backed up ('' picks every VM)."
    )
    retention: BackupRetention = Field(default_factory=BackupRetention)
    max_per_host: int = Field(default=1, ge=1, le=64, description="Backups running at once on one host.")
    max_per_target: int = Field(
        default=2, ge=1, le=256, description="Backups running at once into the target."
    )
    start_window_minutes: int = Field(
        default=60,
        ge=1,
        le=7 * 24 * 60,
        description="A window not started within this long (the control plane was down) is missed.",
    )
    verify_schedule: Schedule | None = Field(
        default=None, description="When the newest backup of each VM is verified (optional)."
    )


class BackupPolicyStatus(BaseModel):
    window: datetime | None = Field(default=None, description="The schedule's fire time served last.")
    last_run: datetime | None = Field(default=None, description="When the last window's backups began.")
    next_run: datetime | None = None
    waiting: list[str] = Field(
        default_factory=list, description="VMs of the current window whose backup has not begun (limits)."
    )
    missed_windows: int = Field(default=0, description="Windows missed so far (down, or held past the next).")
    last_missed: datetime | None = None
    last_missed_reason: str = ""
    verify_window: datetime | None = None
    backups: int = Field(default=0, description="This policy's backups kept now.")
    succeeded: int = 0
    failed: int = 0
    running: int = 0
    pruned: int = Field(default=0, description="Backups retention removed so far.")
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)


class BackupPolicy(Resource):
    KIND: ClassVar[str] = "BackupPolicy"
    PLURAL: ClassVar[str] = "backuppolicies"
    spec: BackupPolicySpec
    status: BackupPolicyStatus = Field(default_factory=BackupPolicyStatus)
