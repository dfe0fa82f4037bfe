"""The typed settings registry: every tunable, its type, default, allowed values and meaning.

Pure. What a setting is (its type, scope, parsing, resolution) is ``domain.setting_def``;
the store keeps values that differ from the default as Setting resources; readers merge
them with these definitions.

Scope: a ``global`` setting has one value. A ``host`` setting has a global value
that an admin may override per cluster and per host (as CloudStack's cluster-scoped
``cpu.overprovisioning.factor``); ``SettingDef.effective`` says which one applies.
"""

from __future__ import annotations

from collections.abc import Mapping

from virtplane.domain.setting_def import ScopedValues, SettingDef, SettingError, SettingScope, SettingType
from virtplane.domain.settings_rebalance import REBALANCE_SETTINGS
from virtplane.domain.vocabulary import KvmBroken, MaintenanceStrategy, strategy_meaning

__all__ = [
    "REGISTRY",
    "ScopedValues",
    "SettingDef",
    "SettingError",
    "SettingScope",
    "SettingType",
    "definition",
]


def _defs(*defs: SettingDef) -> dict[str, SettingDef]:
    return {d.key: d for d in defs}


REGISTRY: Mapping[str, SettingDef] = _defs(
    SettingDef(
        "host.maintenance.local.storage.strategy",
        SettingType.STRING,
        MaintenanceStrategy.ERROR.value,
        "What maintenance does with running VMs that have a disk on local storage: "
        + "; ".join(f"{s.value}: {strategy_meaning(s)}" for s in MaintenanceStrategy)
        + ".",
        allowed=tuple(s.value for s in MaintenanceStrategy),
    ),
    SettingDef(
        "placement.real_use",
        SettingType.BOOL,
        False,
        "Placement (a start, a migration without a target) prefers, among hosts equally loaded by "
        "migrations, the one whose measured CPU use is lower (by tenths) before the one with more free "
        "memory. Off: allocation only. The use is what the leader collected in the last two rounds.",
    ),
    SettingDef(
        "host.maintenance.return_vms",
        SettingType.BOOL,
        False,
        "When maintenance is cancelled, migrate back the VMs that left the host, if there is room.",
    ),
    SettingDef(
        "migration.max_outbound_per_host",
        SettingType.INT,
        2,
        "Live migrations leaving one host at the same time.",
        minimum=1,
        maximum=64,
    ),
    SettingDef(
        "migration.max_inbound_per_host",
        SettingType.INT,
        1,
        "Live migrations arriving at one host at the same time.",
        minimum=1,
        maximum=64,
    ),
    SettingDef(
        "migration.max_per_cluster",
        SettingType.INT,
        5,
        "Live migrations running in one cluster at the same time.",
        minimum=1,
        maximum=1000,
    ),
    SettingDef(
        "migration.progress_timeout_s",
        SettingType.INT,
        150,
        "Abort a migration that made no progress for this long.",
        minimum=1,
        maximum=86400,
    ),
    SettingDef(
        "migration.completion_timeout_per_gib_s",
        SettingType.INT,
        800,
        "Abort a migration that runs longer than this many seconds per GiB of memory and copied disk.",
        minimum=1,
        maximum=86400,
    ),
    SettingDef(
        "migration.max_attempts",
        SettingType.INT,
        3,
        "Targets tried for one VM before maintenance gives up on it.",
        minimum=1,
        maximum=100,
    ),
    SettingDef(
        "migration.bandwidth_mib_s",
        SettingType.INT,
        0,
        "Bandwidth limit per migration in MiB/s; 0 means no limit. A VM's spec.migration overrides it.",
        minimum=0,
        maximum=1_000_000,
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "migration.auto_converge",
        SettingType.BOOL,
        False,
        "Slow a migrating guest's vCPUs while pre-copy does not converge (libvirt's auto-converge). "
        "A VM's spec.migration overrides it.",
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "migration.post_copy_after_s",
        SettingType.INT,
        0,
        "Switch a migration to post-copy after this many seconds without convergence; 0 never. "
        "RISK: during post-copy a failure of either host or of the link loses the guest. "
        "A VM's spec.migration overrides it.",
        minimum=0,
        maximum=86400,
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "migration.max_downtime_ms",
        SettingType.INT,
        0,
        "Longest pause of a migration's switch-over in ms; 0 the hypervisor's default (QEMU: 300). "
        "A VM's spec.migration overrides it.",
        minimum=0,
        maximum=60_000,
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "host.cpu_allocation_ratio",
        SettingType.FLOAT,
        4.0,
        "vCPUs a host may allocate per physical CPU it reports (as Nova's cpu_allocation_ratio); "
        "placement and the maintenance plan count a host's vCPUs as its CPUs times this.",
        minimum=0.1,
        maximum=64,
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "host.memory_allocation_ratio",
        SettingType.FLOAT,
        1.0,
        "Memory a host may allocate per MiB it reports; above 1.0 the guests overcommit memory "
        "and a full host may fail to start a guest.",
        minimum=0.1,
        maximum=16,
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "vm.stop.agent_after_s",
        SettingType.FLOAT,
        15.0,
        "How long a graceful stop waits for the guest to heed the ACPI power button before it asks "
        "the guest's agent to shut it down (when one is connected); at most half the VM's "
        "termination grace period, which still bounds the whole stop.",
        minimum=0,
        maximum=3600,
    ),
    SettingDef(
        "vm.guest_agent.refresh_s",
        SettingType.FLOAT,
        60.0,
        "How often the addresses a running guest reports through its agent are read again "
        "(they are read at once when its agent connects).",
        minimum=1,
        maximum=86400,
    ),
    SettingDef(
        "vm.start.backoff_base_s",
        SettingType.FLOAT,
        1.0,
        "Delay before the first retry of a failed start; it doubles with each failure.",
        minimum=0.001,
        maximum=3600,
    ),
    SettingDef(
        "vm.hotplug.detach_timeout_s",
        SettingType.FLOAT,
        60.0,
        "How long a running guest may take to release a disk or NIC taken out of its VM's spec "
        "before the VM's DevicesReady condition says it did not (DetachTimedOut).",
        minimum=0.01,
        maximum=3600,
    ),
    SettingDef(
        "vm.start.backoff_cap_s",
        SettingType.FLOAT,
        300.0,
        "Longest delay between two start attempts.",
        minimum=0.01,
        maximum=86400,
    ),
    SettingDef(
        "host.liveness.probe_interval_s",
        SettingType.FLOAT,
        10.0,
        "How often a host that nothing else wakes is probed (its connection and a facts call). "
        "A failure is noticed at the next probe: this delays failover by up to its length.",
        minimum=0.05,
        maximum=3600,
    ),
    SettingDef(
        "host.liveness.disconnected_after_s",
        SettingType.FLOAT,
        10.0,
        "A host that does not answer (connection or heartbeat) for this long without a break "
        "becomes Disconnected: no new VMs; its VMs wait. Shorter drops leave it Up.",
        minimum=0.01,
        maximum=86400,
    ),
    SettingDef(
        "host.liveness.probe_timeout_s",
        SettingType.FLOAT,
        5.0,
        "How long a probe of a host (connecting, asking its facts) may take; one that takes "
        "longer counts as no answer, and its connection is given up.",
        minimum=0.01,
        maximum=600,
    ),
    SettingDef(
        "host.liveness.reconnected_after_s",
        SettingType.FLOAT,
        60.0,
        "A Disconnected host must answer this long without a break to be Up again, so that a "
        "flapping host neither takes VMs nor gets fenced.",
        minimum=0.0,
        maximum=86400,
    ),
    SettingDef(
        "host.fencing.after_s",
        SettingType.FLOAT,
        15.0,
        "A Disconnected host with spec.fencing is powered off through its BMC once it has not "
        "answered for this long without a break (counted from the first missed answer).",
        minimum=0.01,
        maximum=86400,
    ),
    SettingDef(
        "host.fencing.retry_base_s",
        SettingType.FLOAT,
        5.0,
        "Delay before the first retry of a fence the BMC did not carry out; it doubles each time.",
        minimum=0.001,
        maximum=3600,
    ),
    SettingDef(
        "host.fencing.retry_cap_s",
        SettingType.FLOAT,
        300.0,
        "Longest delay between two fencing attempts.",
        minimum=0.01,
        maximum=86400,
    ),
    SettingDef(
        "host.fencing.timeout_s",
        SettingType.FLOAT,
        10.0,
        "How long one call to a BMC may take before it counts as not answering.",
        minimum=0.01,
        maximum=600,
    ),
    SettingDef(
        "host.accelerator.kvm_broken",
        SettingType.STRING,
        KvmBroken.FALLBACK.value,
        "A host that offers KVM but whose validation guest does not boot under it: fallback runs "
        "its guests under TCG (and says so), refuse gives it no guests.",
        allowed=tuple(k.value for k in KvmBroken),
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "host.accelerator.validation_kernel",
        SettingType.STRING,
        "/vmlinuz",
        "A Linux kernel on each host that the KVM validation guest boots (with no root disk it "
        "must reach its panic, the known point, on the serial console). Debian links the "
        "installed kernel at /vmlinuz, Ubuntu at /boot/vmlinuz.",
        scope=SettingScope.HOST,
    ),
    SettingDef(
        "host.accelerator.validation_timeout_s",
        SettingType.FLOAT,
        60.0,
        "How long the KVM validation guest may take to reach its known point; later is broken.",
        minimum=1,
        maximum=3600,
    ),
    SettingDef(
        "cpu.model",
        SettingType.STRING,
        "",
        "The CPU model of a cluster's VMs (cpu_mode cluster), a libvirt model name such as "
        "Haswell-noTSX; empty: the baseline libvirt computes from every host's CPU, so a VM can "
        "live-migrate to any host of its cluster.",
        scope=SettingScope.CLUSTER,
    ),
    SettingDef(
        "host.recovery.max_starting_per_cluster",
        SettingType.INT,
        10,
        "VMs of a failed host that may be starting elsewhere at the same time, per cluster; "
        "the others wait their turn by spec.recovery_priority.",
        minimum=1,
        maximum=10000,
    ),
    SettingDef(
        "controller.resync_period_s",
        SettingType.FLOAT,
        60.0,
        "Every object is reconciled at least this often, even without events "
        "(longer for large fleets: see controller.resync_max_per_s).",
        minimum=1,
        maximum=86400,
    ),
    SettingDef(
        "controller.resync_max_per_s",
        SettingType.FLOAT,
        50.0,
        "At most this many objects of one kind are resynced per second: a fleet larger than "
        "resync_period_s x this gets a longer period, so an idle fleet's cost stops growing.",
        minimum=0.1,
        maximum=100000,
    ),
    SettingDef(
        "images.library_max_gib",
        SettingType.INT,
        0,
        "The most an image library pool may hold of files uploaded or imported through the API, "
        "in GiB (each library on its own); an upload that would pass it is refused before "
        "anything is written. 0: no limit.",
        minimum=0,
        maximum=1024 * 1024,
    ),
    SettingDef(
        "console.idle_timeout_s",
        SettingType.FLOAT,
        1800.0,
        "A serial-console session with no byte either way for this long is detached (it holds "
        "the VM's only console), and a screen (VNC) session closed; 0 never detaches.",
        minimum=0,
        maximum=604800,
    ),
    SettingDef(
        "store.changes.retention_s",
        SettingType.INT,
        3600,
        "How long the change feed keeps a change: a watch or a paged list may resume from a "
        "revision this old (an older one gets 410 Expired and lists again).",
        minimum=60,
        maximum=366 * 86400,
    ),
    SettingDef(
        "store.changes.max_rows",
        SettingType.INT,
        500_000,
        "The change feed keeps at most this many changes, however young (about 60 bytes each).",
        minimum=100,
        maximum=1_000_000_000,
    ),
    SettingDef(
        "events.retention_s",
        SettingType.INT,
        86400,
        "How long events are kept (virtplane events).",
        minimum=60,
        maximum=3660 * 86400,
    ),
    SettingDef(
        "events.max_rows",
        SettingType.INT,
        200_000,
        "At most this many events are kept, however young (a few hundred bytes each).",
        minimum=100,
        maximum=1_000_000_000,
    ),
    SettingDef(
        "tokens.dead_retention_s",
        SettingType.INT,
        30 * 86400,
        "How long a token stays listed after it expired or was revoked (logins make one each); "
        "until then its use is refused with the reason, after it as an unknown token.",
        minimum=3600,
        maximum=3660 * 86400,
    ),
    SettingDef(
        "audit.retention_days",
        SettingType.INT,
        90,
        "Audit records older than this are deleted (checked every few minutes).",
        minimum=1,
        maximum=36500,
    ),
    SettingDef(
        "audit.max_records",
        SettingType.INT,
        1_000_000,
        "At most this many audit records are kept: the oldest go first.",
        minimum=1000,
        maximum=1_000_000_000,
    ),
    *REBALANCE_SETTINGS,
)


def definition(key: str) -> SettingDef:
    try:
        return REGISTRY[key]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise SettingError(f"unknown setting {key!r}; known settings: {known}") from None
