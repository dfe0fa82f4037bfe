"""Which value of a setting applies where: the scope table."""

from __future__ import annotations

from typing import Any

import pytest

from virtplane.domain.settings import REGISTRY, ScopedValues, SettingError, SettingScope, definition

RATIO = definition("host.cpu_allocation_ratio")  # scope host, default 4.0
GLOBAL = definition("migration.max_attempts")  # scope global, default 3

STORED = ScopedValues(value=2.0, clusters={"batch": 8.0, "db": 1.5}, hosts={"h1": 1.0, "h9": 16.0})


@pytest.mark.parametrize(
    ("stored", "cluster", "host", "expected"),
    [
        (None, None, None, 4.0),  # nothing stored: the default
        (None, "batch", "h1", 4.0),
        (STORED, None, None, 2.0),  # the global value
        (STORED, "web", "h2", 2.0),  # neither the cluster nor the host has an override
        (STORED, "batch", "h2", 8.0),  # the cluster's override
        (STORED, "batch", None, 8.0),
        (STORED, "batch", "h1", 1.0),  # the host's override wins over its cluster's
        (STORED, "web", "h9", 16.0),
        (STORED, None, "h9", 16.0),
        (ScopedValues(value=4.0, hosts={"h1": 1.0}), "batch", "h1", 1.0),  # only overrides stored
    ],
)
def test_host_overrides_cluster_overrides_global_overrides_default(
    stored: ScopedValues | None, cluster: str | None, host: str | None, expected: float
) -> None:
    assert RATIO.effective(stored, cluster=cluster, host=host) == expected


def test_a_cluster_setting_takes_its_clusters_value_whatever_the_host() -> None:
    stored = ScopedValues(value="", clusters={"batch": "EPYC"}, hosts={"h1": "ignored"})
    assert definition("cpu.model").effective(stored, cluster="batch", host="h1") == "EPYC"
    assert definition("cpu.model").effective(stored, cluster="web", host="h1") == ""


def test_a_global_setting_ignores_overrides_it_cannot_have() -> None:
    stored = ScopedValues(value=5, clusters={"batch": 9}, hosts={"h1": 9})
    assert GLOBAL.effective(stored, cluster="batch", host="h1") == 5


@pytest.mark.parametrize(
    ("d", "cluster", "host", "error"),
    [
        (RATIO, None, None, None),
        (RATIO, "batch", None, None),
        (RATIO, None, "h1", None),
        (RATIO, "batch", "h1", "a cluster or a host, not both"),
        (GLOBAL, None, None, None),
        (GLOBAL, "batch", None, "is a global setting"),
        (GLOBAL, None, "h1", "is a global setting"),
        (definition("cpu.model"), "batch", None, None),
        (definition("cpu.model"), None, "h1", "every host of a cluster shares it"),
    ],
)
def test_who_may_have_an_override(d: Any, cluster: str | None, host: str | None, error: str | None) -> None:
    if error is None:
        d.check_scope(cluster=cluster, host=host)
    else:
        with pytest.raises(SettingError, match=error):
            d.check_scope(cluster=cluster, host=host)


def test_the_allocation_ratios_are_host_scoped_with_novas_defaults() -> None:
    assert (RATIO.default, RATIO.scope) == (4.0, SettingScope.HOST)
    memory = definition("host.memory_allocation_ratio")
    assert (memory.default, memory.scope) == (1.0, SettingScope.HOST)
    assert {k for k, d in REGISTRY.items() if d.scope is SettingScope.HOST} == {
        "host.cpu_allocation_ratio",
        "host.memory_allocation_ratio",
        "host.accelerator.kvm_broken",
        "host.accelerator.validation_kernel",
        # the migration policy's defaults: a cluster or host may have its own (a VM's spec wins)
        "migration.auto_converge",
        "migration.bandwidth_mib_s",
        "migration.max_downtime_ms",
        "migration.post_copy_after_s",
    }
