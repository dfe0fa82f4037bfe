"""The migration policy as it applies: the VM's fields over the settings, the post-copy
bound, and the risk note of a VM that may never converge."""

from __future__ import annotations

import pytest

from virtplane.domain.migration_policy import (
    EffectivePolicy,
    convergence_risk,
    effective_policy,
    post_copy_due,
)
from virtplane.domain.resources import MigrationPolicy

SETTINGS = EffectivePolicy(auto_converge=True, post_copy_after_s=60, max_downtime_ms=500, bandwidth_mib_s=400)


def test_the_vms_fields_win_and_unset_ones_take_the_settings() -> None:
    assert effective_policy(MigrationPolicy(), SETTINGS) == SETTINGS
    own = MigrationPolicy(auto_converge=False, post_copy_after_s=0, max_downtime_ms=0, bandwidth_mib_s=0)
    assert effective_policy(own, SETTINGS) == EffectivePolicy()  # 0 and False are values, not unset
    assert effective_policy(MigrationPolicy(bandwidth_mib_s=50), SETTINGS).bandwidth_mib_s == 50


@pytest.mark.parametrize(
    ("after_s", "running_s", "in_post_copy", "due"),
    [
        (0, 10_000, False, False),  # never
        (60, 59.9, False, False),
        (60, 60, False, True),
        (60, 600, True, False),  # already switched
    ],
)
def test_post_copy_is_due_once_its_bound_has_passed(
    after_s: int, running_s: float, in_post_copy: bool, due: bool
) -> None:
    policy = EffectivePolicy(post_copy_after_s=after_s)
    assert post_copy_due(policy, running_s, in_post_copy=in_post_copy) is due


@pytest.mark.parametrize(
    ("policy", "dirty", "at_risk"),
    [
        (EffectivePolicy(bandwidth_mib_s=400), 900.0, True),
        (EffectivePolicy(bandwidth_mib_s=400), 400.0, False),  # as fast as the link: converges slowly
        (EffectivePolicy(bandwidth_mib_s=400), None, False),  # never migrated: nothing seen
        (EffectivePolicy(bandwidth_mib_s=0), 900.0, False),  # no limit: the link's speed is unknown
        (EffectivePolicy(bandwidth_mib_s=400, auto_converge=True), 900.0, False),
        (EffectivePolicy(bandwidth_mib_s=400, post_copy_after_s=30), 900.0, False),
    ],
)
def test_the_risk_note(policy: EffectivePolicy, dirty: float | None, at_risk: bool) -> None:
    assert bool(convergence_risk(policy, dirty)) is at_risk
