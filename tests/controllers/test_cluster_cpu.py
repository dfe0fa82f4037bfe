"""A cluster's CPU model: the baseline of its hosts' CPUs (those of the same accelerator), or the
admin's named model, used in every cluster-mode VM's definition; host-passthrough by choice."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import eventually, make_plane
from tests.controllers.helpers import add_host, add_vm, wait_phase
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.host import HostReconciler
from virtplane.domain.resources import Host, HostCPU, RunPolicy
from virtplane.drivers.base import domain_name
from virtplane.reconcile import Request
from virtplane.store.store import Store

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


async def test_a_look_at_an_idle_host_does_not_go_over_every_host_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's CPUs are read from the cache again only after a host changed: 500 idle looks
    over 500 hosts were 250,000 CPU signatures a round (4 of an idle look's 5 ms)."""
    plane = make_plane(store)
    for name, uri in (("h1", H1), ("h2", H2)):
        add_host(plane, name, uri=uri)
    plane.cache.load()
    look_at = HostReconciler(plane.ctx)
    for _ in range(2):  # each learns its CPU, then the baseline of both
        for name in ("h1", "h2"):
            await look_at(Request(Host.KIND, name))
            plane.cache.load()
    assert "baseline of h1, h2" in plane.store.get(Host, "h1").status.cluster_cpu.source  # type: ignore[union-attr]

    await look_at(Request(Host.KIND, "h1"))  # reads the hosts the cache loaded above, writes nothing
    signatures: list[str] = []
    signature = HostCPU.signature
    monkeypatch.setattr(HostCPU, "signature", lambda cpu: signatures.append(cpu.model) or signature(cpu))
    await look_at(Request(Host.KIND, "h1"))
    assert len(signatures) == 1, f"an idle look read the cluster's CPUs again: {signatures}"

    def lose_x2apic(host: Host) -> None:  # as h2's own look reports after a firmware change
        assert host.status.cpu is not None
        host.status.cpu.features = ["avx"]

    plane.store.mutate(Host, "h2", lose_x2apic)
    plane.cache.load()
    await look_at(Request(Host.KIND, "h1"))
    assert cluster_cpu(plane, "h1") == ("EPYC", ["avx"]), "another host's change is seen by the next look"
