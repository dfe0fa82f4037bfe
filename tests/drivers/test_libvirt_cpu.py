"""Guest CPUs in the domain XML: the cluster's model, host-passthrough by choice, the default;
and the host-model and baseline as libvirt writes them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from tests.drivers.test_libvirt_domain_xml import spec
from virtplane.domain.resources import HostCPU
from virtplane.drivers.libvirt.accelerator import cpu_xml, host_model, parse_cpu
from virtplane.drivers.libvirt.domain_xml import TEST_DRIVER_OPTIONS, XmlOptions, build_domain_xml

DOMCAPS = """<domainCapabilities><cpu>
<mode name='host-passthrough' supported='no'/>
<mode name='host-model' supported='yes'><model fallback='forbid'>EPYC</model><vendor>AMD</vendor>
<feature policy='require' name='x2apic'/><feature policy='disable' name='rdseed'/></mode>
<mode name='custom' supported='yes'><model usable='yes'>qemu64</model></mode>
</cpu></domainCapabilities>"""


def cpu_of(xml: str) -> tuple[dict[str, str], str | None, list[tuple[str, str]]] | None:
    cpu = ET.fromstring(xml).find("cpu")
    if cpu is None:
        return None
    features = [(f.get("policy", ""), f.get("name", "")) for f in cpu.findall("feature")]
    return dict(cpu.attrib), cpu.findtext("model"), features


@pytest.mark.parametrize(
    ("changes", "options", "expected"),
    [
        (
            {"cpu_model": "EPYC", "cpu_features": ("x2apic",), "cpu_disabled": ("rdseed",)},
            XmlOptions(),
            ({"mode": "custom", "match": "exact"}, "EPYC", [("require", "x2apic"), ("disable", "rdseed")]),
        ),
        (
            {"cpu_passthrough": True},
            XmlOptions(domain_type="kvm"),
            ({"mode": "host-passthrough", "migratable": "on"}, None, []),
        ),
        ({}, XmlOptions(), ({"mode": "custom", "match": "exact"}, "qemu64", [])),  # no cluster model yet
        ({"cpu_model": "EPYC"}, TEST_DRIVER_OPTIONS, None),  # the test driver takes no CPU models
    ],
)
def test_the_guest_cpu(changes: dict[str, object], options: XmlOptions, expected: object) -> None:
    assert cpu_of(build_domain_xml(replace(spec(), **changes), options)) == expected  # type: ignore[arg-type]


def test_a_cluster_model_never_falls_back_to_another() -> None:
    xml = build_domain_xml(replace(spec(), cpu_model="EPYC"), XmlOptions())
    assert ET.fromstring(xml).find("cpu/model").get("fallback") == "forbid"  # type: ignore[union-attr]


def test_the_host_model_of_the_domain_capabilities_and_back() -> None:
    cpu = host_model(DOMCAPS)
    assert cpu == HostCPU(model="EPYC", vendor="AMD", features=["x2apic"], disabled=["rdseed"])
    assert parse_cpu(cpu_xml(cpu)) == cpu  # what goes into baselineHypervisorCPU reads back the same
    assert (
        host_model(DOMCAPS.replace("name='host-model' supported='yes'", "name='host-model' supported='no'"))
        is None
    )
