"""The settings of rebalancing (issue 37), each a cluster's to override.

The mode is a setting rather than a resource of its own: settings already have per-cluster
overrides, typed validation, an audit trail, an API and a CLI, and a mode is one word; the
plan it produces is derived data (recomputed from the cache at any time), not intent.
"""

from __future__ import annotations

from enum import StrEnum

from virtplane.domain.setting_def import SettingDef, SettingScope, SettingType

__all__ = ["REBALANCE_SETTINGS", "RebalanceMode"]


class RebalanceMode(StrEnum):
    OFF = "off"
    PLAN = "plan"
    """The plan is computed and shown, nothing moves."""
    AUTOMATIC = "automatic"
    """The plan's moves are carried out as live migrations."""


REBALANCE_SETTINGS = (
    SettingDef(
        "rebalance.mode",
        SettingType.STRING,
        RebalanceMode.OFF.value,
        "Rebalancing of a cluster's host load: off; plan (the plan of live migrations is computed "
        "and shown, nothing moves); automatic (its moves are carried out, within the limits).",
        allowed=tuple(m.value for m in RebalanceMode),
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.real_use_weight",
        SettingType.FLOAT,
        0.5,
        "How a host's load is counted: 1 its measured CPU use only, 0 its allocation (vCPUs and "
        "memory) only, between: a mix of both.",
        minimum=0.0,
        maximum=1.0,
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.min_gain",
        SettingType.FLOAT,
        0.005,
        "The least a move must lower the cluster's imbalance (the sum of squared deviations of "
        "host load from the mean) to be proposed: moving a tenth of a host's load between hosts "
        "0.1 above and below the mean lowers it by 0.02.",
        minimum=0.0,
        maximum=1.0,
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.max_moves_per_plan",
        SettingType.INT,
        10,
        "The most moves one plan of a cluster proposes.",
        minimum=1,
        maximum=10_000,
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.max_moves_per_host",
        SettingType.INT,
        2,
        "The most moves of one plan that leave or reach one host.",
        minimum=1,
        maximum=1000,
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.max_moves_per_hour",
        SettingType.INT,
        20,
        "The most live migrations automatic rebalancing starts in a cluster within an hour.",
        minimum=1,
        maximum=100_000,
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.hold_s",
        SettingType.INT,
        3600,
        "A VM a rebalance moved is not moved by one again for this long (no ping-pong).",
        minimum=0,
        maximum=7 * 86400,
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "rebalance.interval_s",
        SettingType.INT,
        300,
        "How often the leader looks at each cluster's balance (plan and automatic modes).",
        minimum=10,
        maximum=86400,
    ),
)
