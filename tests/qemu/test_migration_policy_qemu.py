"""A busy guest (``vp.dirty=N``: it keeps rewriting N MiB) migrated between two real
daemons under the migration policy (TCG): with a bandwidth it outpaces, auto-converge
throttles it until pre-copy converges, and post-copy, once asked for, finishes at once.
The job shows the dirty rate and the memory left while it runs."""

from __future__ import annotations

from typing import Any

import pytest

from virtplane.drivers.base import DomainState, MigrationJob, MigrationPhase, MigrationRequest

from .conftest import Rig, console_shows, eventually, guest_spec
from .test_qemu_guests import finished_job, state_is

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

BANDWIDTH_MIB_S = 16  # the 64 MiB the guest rewrites take 4 s to send: it dirties them faster


async def busy_guest_migrating(rig: Rig, a: Any, uid: str, **policy: Any) -> tuple[str, MigrationJob]:
    """Boot the busy guest on a and start migrating it to b; the job once memory passes repeat."""
    spec = guest_spec(rig, uid, memory_mib=192, cmdline="vp.dirty=64")
    await a.ensure_defined(spec)
    await a.start(spec.name)
    await console_shows(rig, spec.name, "TICK 1")
    request = MigrationRequest(
        domain=spec.name, target_uri=rig.hosts["b"].uri, bandwidth_mib_s=BANDWIDTH_MIB_S, **policy
    )
    await a.migrate(request)

    async def progress() -> MigrationJob | None:
        job: MigrationJob | None = await a.migration_job(spec.name)
        return job

    job = await eventually(progress, lambda j: j is not None and (j.finished or j.iteration >= 2), 90.0)
    assert job is not None
    return spec.name, job


async def arrived(a: Any, b: Any, name: str) -> None:
    job = await finished_job(a, name)
    assert job.phase is MigrationPhase.COMPLETED, job.error
    await state_is(b, name, DomainState.RUNNING)
    assert await a.get_info(name) is None


async def test_auto_converge_brings_a_busy_guest_over(rig: Rig, drivers: dict[str, Any]) -> None:
    a, b = drivers["a"], drivers["b"]
    name, job = await busy_guest_migrating(rig, a, "busy-ac", auto_converge=True)
    assert not job.finished, "the busy guest needs more than one pass"
    assert job.dirty_rate_mib_s > 0 and job.memory_remaining_mib > 0
    await arrived(a, b, name)
    await b.destroy(name)


async def test_post_copy_finishes_a_busy_guests_migration(rig: Rig, drivers: dict[str, Any]) -> None:
    a, b = drivers["a"], drivers["b"]
    name, job = await busy_guest_migrating(rig, a, "busy-pc", post_copy=True, max_downtime_ms=100)
    assert not job.finished, "the busy guest needs more than one pass"
    await a.start_post_copy(name)
    await arrived(a, b, name)
    await b.destroy(name)
