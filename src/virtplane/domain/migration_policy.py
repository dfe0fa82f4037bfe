"""A VM's migration policy as it applies: its ``spec.migration`` over the settings.

Pure. ``effective_policy`` merges the two (the VM's fields win), ``post_copy_due`` says when
a migration that has not converged switches to post-copy, and ``convergence_risk`` why a VM
may never finish pre-copy: it dirties memory faster than its migration may send, and neither
auto-converge nor post-copy would help.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from virtplane.domain.resources import MigrationPolicy

__all__ = ["EffectivePolicy", "convergence_risk", "effective_policy", "post_copy_due"]

T = TypeVar("T")


def _pick(own: T | None, default: T) -> T:
    return default if own is None else own


@dataclass(frozen=True)
class EffectivePolicy:
    auto_converge: bool = False
    post_copy_after_s: int = 0  # 0: never
    max_downtime_ms: int = 0  # 0: the hypervisor's default
    bandwidth_mib_s: int = 0  # 0: no limit

    @property
    def post_copy(self) -> bool:
        return self.post_copy_after_s > 0


def effective_policy(vm: MigrationPolicy, defaults: EffectivePolicy) -> EffectivePolicy:
    """``defaults`` (the settings for the VM's host) with the fields ``vm`` sets."""
    return EffectivePolicy(
        auto_converge=_pick(vm.auto_converge, defaults.auto_converge),
        post_copy_after_s=_pick(vm.post_copy_after_s, defaults.post_copy_after_s),
        max_downtime_ms=_pick(vm.max_downtime_ms, defaults.max_downtime_ms),
        bandwidth_mib_s=_pick(vm.bandwidth_mib_s, defaults.bandwidth_mib_s),
    )


def post_copy_due(policy: EffectivePolicy, running_s: float, *, in_post_copy: bool) -> bool:
    """Whether a migration running for ``running_s`` should be switched to post-copy now."""
    return policy.post_copy and not in_post_copy and running_s >= policy.post_copy_after_s


def convergence_risk(policy: EffectivePolicy, dirty_rate_mib_s: float | None) -> str:
    """Why a migration of a VM that dirtied ``dirty_rate_mib_s`` (as last seen) may never
    converge under ``policy``; "" when nothing says so. Without a bandwidth limit the link's
    speed is unknown here, so only a limit can be compared."""
    if dirty_rate_mib_s is None or policy.bandwidth_mib_s <= 0:
        return ""
    if dirty_rate_mib_s <= policy.bandwidth_mib_s or policy.auto_converge or policy.post_copy:
        return ""
    return (
        f"may not converge: it dirtied {dirty_rate_mib_s:.0f} MiB/s, more than its migration bandwidth "
        f"of {policy.bandwidth_mib_s} MiB/s, with neither auto-converge nor post-copy"
    )
