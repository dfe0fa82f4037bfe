"""The migration policy in libvirt's terms: the flags of ``migrateToURI3`` and the job's
statistics read back as the dirty rate, the memory left and the throttle."""

from __future__ import annotations

from typing import Any

from tests.conftest import libvirt_or_skip
from virtplane.drivers.base import MigrationRequest
from virtplane.drivers.libvirt.migration import MIB, _stats_fields, migration_parameters

DOMAIN_XML = "<domain type='test'><name>d</name><devices/></domain>"


def _flags(**policy: Any) -> tuple[dict[str, Any], int]:
    request = MigrationRequest(domain="d", target_uri="qemu+tls://kvm-2.example/system", **policy)
    return migration_parameters(request, DOMAIN_XML, migration_address=None)


def test_auto_converge_and_post_copy_are_flags_only_when_asked() -> None:
    lv = libvirt_or_skip()
    _, plain = _flags()
    assert not plain & lv.VIR_MIGRATE_AUTO_CONVERGE and not plain & lv.VIR_MIGRATE_POSTCOPY
    params, flags = _flags(auto_converge=True, post_copy=True, bandwidth_mib_s=300)
    assert flags & lv.VIR_MIGRATE_AUTO_CONVERGE and flags & lv.VIR_MIGRATE_POSTCOPY
    assert flags & lv.VIR_MIGRATE_LIVE  # still a live pre-copy until post-copy is asked for
    assert params[lv.VIR_MIGRATE_PARAM_BANDWIDTH] == 300


def test_the_job_statistics_become_dirty_rate_memory_left_and_throttle() -> None:
    stats = {
        "data_total": 2048 * MIB,
        "data_processed": 1024 * MIB,
        "data_remaining": 1024 * MIB,
        "memory_iteration": 4,
        "memory_remaining": 300 * MIB,
        "memory_dirty_rate": 25_600,  # pages per second
        "memory_page_size": 4096,
        "auto_converge_throttle": 30,
    }
    fields = _stats_fields(stats)
    assert fields["dirty_rate_mib_s"] == 100.0  # 25 600 pages of 4 KiB
    assert fields["memory_remaining_mib"] == 300.0
    assert (fields["iteration"], fields["throttle_pct"]) == (4, 30)
