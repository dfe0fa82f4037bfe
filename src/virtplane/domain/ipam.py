"""Addresses and MACs for NICs: pure rules over the standard library's ``ipaddress``.

The store makes them unique (a claim per address and per MAC, see ``store.claims``);
this module only says which values are valid and which one to take next.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from virtplane.domain.names import MAC

__all__ = [
    "MAC_PREFIX",
    "Claim",
    "address_refusal",
    "claim_reason",
    "derive_mac",
    "first_free",
    "host_range",
    "ip_claim",
    "mac_claim",
    "normalise_mac",
]

MAC_PREFIX = "52:54:00"
"""QEMU's prefix for guest NICs (what libvirt gives a NIC without a MAC)."""


def normalise_mac(value: str) -> str:
    """A MAC in lower case with colons; refuses multicast and all-zero ones (a NIC needs a unicast MAC)."""
    mac = value.strip().lower().replace("-", ":")
    if not MAC.matches(mac):
        raise ValueError(f"{value!r} is not a MAC address (six hex pairs, e.g. 52:54:00:12:34:56)")
    if int(mac[:2], 16) & 1:
        raise ValueError(f"{value!r} is a multicast MAC; a NIC needs a unicast one")
    if mac == "00:00:00:00:00:00":
        raise ValueError("00:00:00:00:00:00 is not a usable MAC")
    return mac


def derive_mac(vm_uid: str, index: int, attempt: int = 0) -> str:
    """The MAC of a VM's NIC ``index`` when none was chosen: stable for the VM's life (from its
    uid), under QEMU's prefix. ``attempt`` picks another one when the first is taken."""
    digest = hashlib.sha256(f"{vm_uid}/{index}/{attempt}".encode()).digest()
    return MAC_PREFIX + "".join(f":{b:02x}" for b in digest[:3])


def host_range(
    subnet: IPv4Network, start: IPv4Address | None, end: IPv4Address | None
) -> tuple[IPv4Address, IPv4Address]:
    """The allocation range: the given bounds, or every host address of the subnet."""
    hosts_first = subnet.network_address + (0 if subnet.prefixlen >= 31 else 1)
    hosts_last = subnet.broadcast_address - (0 if subnet.prefixlen >= 31 else 1)
    return (start or hosts_first, end or hosts_last)


def address_refusal(ip: IPv4Address, subnet: IPv4Network, gateway: IPv4Address | None) -> str | None:
    """Why ``ip`` cannot be a NIC's address in ``subnet`` (requested addresses may lie outside
    the allocation range, as a fixed address does in DHCP), or None."""
    if ip not in subnet:
        return f"{ip} is outside the subnet {subnet}"
    if subnet.prefixlen < 31 and ip in (subnet.network_address, subnet.broadcast_address):
        return f"{ip} is the {'network' if ip == subnet.network_address else 'broadcast'} address of {subnet}"
    if gateway is not None and ip == gateway:
        return f"{ip} is the gateway of {subnet}"
    return None


def first_free(
    start: IPv4Address, end: IPv4Address, taken: Iterable[IPv4Address], skip: Iterable[IPv4Address] = ()
) -> IPv4Address | None:
    """The lowest address of ``start``..``end`` that is neither taken nor skipped (the gateway), or None."""
    unavailable = set(taken) | set(skip)
    address = start
    while address <= end:
        if address not in unavailable:
            return address
        address += 1
    return None


def ip_claim(network: str) -> str:
    """The store's claim scope of the addresses of ``network``: one holder per address."""
    return f"ip/{network}"


def mac_claim() -> str:
    """The claim scope of MACs: unique across the store (so also within every cluster)."""
    return "mac"


@dataclass(frozen=True, order=True)
class Claim:
    """A value one object holds alone, within ``scope`` (an address on a network, a MAC)."""

    scope: str
    value: str


def claim_reason(claim: Claim) -> str:
    """Why a value cannot be had, in the API's words, when another object holds it."""
    return "MacInUse" if claim.scope == mac_claim() else "AddressInUse"
