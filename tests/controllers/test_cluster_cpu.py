"""A cluster's CPU model: the baseline of its hosts' CPUs (those of the same accelerator), or the
admin's named model, used in every cluster-mode VM's definition; host-passthrough by choice."""

from __future__ import annotations

import asyncio

from tests.conftest import eventually
from tests.controllers.helpers import add_host, add_vm, wait_phase
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import Host, RunPolicy
from virtplane.drivers.base import domain_name

H1 = "sim://h1?kvm=works&cpu=EPYC&cpufeatures=aes,avx,x2apic"
H2 = "sim://h2?kvm=works&cpu=EPYC&cpufeatures=avx,x2apic,sha-ni"
H3 = "sim://h3?cpu=EPYC&cpufeatures=aes"  # no KVM: its guests get TCG's qemu64


async def look(plane: ControlPlane, name: str) -> Host:
    """A look of ``name``'s host controller now (its next heartbeat would do the same later)."""
    host = plane.store.get(Host, name)
    host.metadata.labels["look"] = str(int(host.metadata.labels.get("look", "0")) + 1)
    seen = asyncio.ensure_future(reconciled(plane, name, kind="Host"))
    plane.store.update(host)
    await seen
    return plane.store.get(Host, name)


def cluster_cpu(plane: ControlPlane, name: str) -> tuple[str, list[str]] | None:
    cpu = plane.store.get(Host, name).status.cluster_cpu
    return (cpu.model, cpu.features) if cpu else None


async def test_the_baseline_of_the_clusters_kvm_hosts_is_every_cluster_vms_cpu(plane: ControlPlane) -> None:
    for name, uri in (("h1", H1), ("h2", H2), ("h3", H3)):
        add_host(plane, name, uri=uri)
    await eventually(lambda: all(plane.store.get(Host, h).status.cpu for h in ("h1", "h2", "h3")))
    await look(plane, "h1")  # h1 looked before h2 had reported its CPU
    assert cluster_cpu(plane, "h1") == ("EPYC", ["avx", "x2apic"])  # what both KVM hosts have
    assert "baseline of h1, h2" in plane.store.get(Host, "h1").status.cluster_cpu.source  # type: ignore[union-attr]
    assert cluster_cpu(plane, "h3") == ("qemu64", []), "TCG hosts are a baseline of their own"

    add_vm(plane, "web", RunPolicy.ALWAYS_ON, placement={"host_affinity": ["h1"]})
    passthrough = add_vm(
        plane, "db", RunPolicy.ALWAYS_ON, cpu_mode="host-passthrough", placement={"host_affinity": ["h1"]}
    )
    web = await wait_phase(plane, "web", "Running")
    await wait_phase(plane, "db", "Running")
    defined = plane.sim.host_named("h1").domains[domain_name(web.metadata.uid)].spec  # type: ignore[union-attr]
    assert (defined.cpu_passthrough, defined.cpu_model, defined.cpu_features) == (
        False,
        "EPYC",
        ("avx", "x2apic"),
    )
    defined = plane.sim.host_named("h1").domains[domain_name(passthrough.metadata.uid)].spec  # type: ignore[union-attr]
    assert (defined.cpu_passthrough, defined.cpu_model) == (True, "")


async def test_a_named_model_set_for_the_cluster_wins(plane: ControlPlane) -> None:
    plane.settings.set("cpu.model", "Haswell-noTSX", cluster="default")
    add_host(plane, "h1", uri=H1)
    await eventually(lambda: cluster_cpu(plane, "h1") == ("Haswell-noTSX", []))
    source = plane.store.get(Host, "h1").status.cluster_cpu.source  # type: ignore[union-attr]
    assert source == "setting cpu.model of cluster default"
