"""On two real daemons: the cluster's CPU is libvirt's baseline of both hosts' CPUs under the
accelerator in use (TCG here: what QEMU's TCG offers), and a guest defined with it live-migrates."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.qemu.conftest import Rig, console_shows, guest_spec
from tests.qemu.test_qemu_guests import finished_job, state_is
from virtplane.drivers.base import DomainState, MigrationPhase, MigrationRequest


async def test_a_guest_with_the_clusters_baseline_cpu_boots_and_live_migrates(
    rig: Rig, drivers: dict[str, Any]
) -> None:
    import libvirt

    a, b = drivers["a"], drivers["b"]
    cpus = [await a.host_cpu(), await b.host_cpu()]
    assert all(cpus), cpus
    baseline = await a.baseline_cpu(cpus)
    assert baseline is not None and baseline.model
    print(f"\ncluster CPU under {a.domain_type}: {baseline.model}, {len(baseline.features)} features added")
    spec = replace(
        guest_spec(rig, "cpu-base"),
        cpu_model=baseline.model,
        cpu_features=tuple(baseline.features),
        cpu_disabled=tuple(baseline.disabled),
    )
    await a.ensure_defined(spec)
    conn = libvirt.open(rig.hosts["a"].uri)
    try:
        defined = conn.lookupByName(spec.name).XMLDesc(0)
    finally:
        conn.close()
    assert f"<model fallback='forbid'>{baseline.model}</model>" in defined, defined
    await a.start(spec.name)
    await console_shows(rig, spec.name, "GUEST-UP")

    await a.migrate(MigrationRequest(domain=spec.name, target_uri=rig.hosts["b"].uri, spec=spec))
    job = await finished_job(a, spec.name)
    assert job.phase is MigrationPhase.COMPLETED, job.error
    await state_is(b, spec.name, DomainState.RUNNING)
    ticks = rig.console(spec.name).count("TICK")
    await console_shows(rig, spec.name, "TICK", count=ticks + 1)  # running over there
    await b.destroy(spec.name)
    await b.undefine(spec.name)
