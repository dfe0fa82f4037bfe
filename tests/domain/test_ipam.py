"""IPAM and MAC rules as tables (pure: no store)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest

from virtplane.domain.ipam import address_refusal, derive_mac, first_free, host_range, normalise_mac

NET = IPv4Network("192.168.10.0/24")
A = IPv4Address


@pytest.mark.parametrize(
    ("ip", "refusal"),
    [
        ("192.168.10.7", None),
        ("192.168.11.7", "outside the subnet"),
        ("192.168.10.0", "network address"),
        ("192.168.10.255", "broadcast address"),
        ("192.168.10.1", "gateway"),
    ],
)
def test_address_refusal(ip: str, refusal: str | None) -> None:
    found = address_refusal(A(ip), NET, A("192.168.10.1"))
    assert (found is None) if refusal is None else (refusal in str(found))


def test_first_free_skips_taken_and_gateway_and_stops_at_the_end() -> None:
    start, end = host_range(NET, None, None)
    assert (start, end) == (A("192.168.10.1"), A("192.168.10.254"))
    assert first_free(start, end, [A("192.168.10.2")], [A("192.168.10.1")]) == A("192.168.10.3")
    assert first_free(A("192.168.10.5"), A("192.168.10.6"), [A("192.168.10.5"), A("192.168.10.6")]) is None


def test_derived_macs_are_stable_unicast_and_differ_per_nic() -> None:
    mac = derive_mac("uid-1", 0)
    assert mac == derive_mac("uid-1", 0) and mac.startswith("52:54:00:")
    assert normalise_mac(mac) == mac
    assert len({derive_mac("uid-1", i) for i in range(4)} | {derive_mac("uid-1", 0, 1)}) == 5


@pytest.mark.parametrize("bad", ["01:00:5e:00:00:01", "00:00:00:00:00:00", "52:54:00:zz:00:01", "52:54:00"])
def test_bad_macs(bad: str) -> None:
    with pytest.raises(ValueError):
        normalise_mac(bad)


def test_macs_are_normalised() -> None:
    assert normalise_mac("52-54-00-AB-CD-EF") == "52:54:00:ab:cd:ef"


def test_which_hosts_have_a_network() -> None:
    from virtplane.domain.networks import NetworkSpec, host_lacks

    bridge = NetworkSpec.model_validate({"kind": "bridge", "bridge": "br0", "cluster": "c1"})
    user = NetworkSpec.model_validate({"kind": "user", "hosts": ["h1"]})
    assert host_lacks(bridge, "h1", "c1", frozenset({"br0"}), False) is None
    assert host_lacks(bridge, "h1", "c1", frozenset({"br1"}), True) == "has no bridge br0"
    assert (
        host_lacks(bridge, "h1", "c2", frozenset({"br0"}), False) == "not in the network's cluster or hosts"
    )
    assert host_lacks(user, "h1", "c1", frozenset(), True) is None
    assert host_lacks(user, "h1", "c1", frozenset(), False) == "its driver offers no user network"
    assert host_lacks(user, "h2", "c1", frozenset(), True) == "not in the network's cluster or hosts"
