"""The NoCloud seed's documents for a VM: meta-data, user-data, network-config (pure).

cloud-init reads YAML; JSON is YAML, so the documents we generate are written as
JSON (the standard library's) and the user's ``user_data`` goes in as given. SSH
keys go into the meta-data's ``public-keys`` (which NoCloud reads like any
datasource), so the user's own user data is never parsed or rewritten.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

__all__ = ["SeedNic", "ipam_bypass", "seed_digest", "seed_documents", "static_addresses"]


@dataclass(frozen=True)
class SeedNic:
    """What the guest needs to configure one NIC."""

    mac: str
    ip: str | None = None
    prefix_length: int | None = None
    gateway: str | None = None
    dns_servers: tuple[str, ...] = ()


def network_config(nics: list[SeedNic]) -> dict[str, Any]:
    """Network config version 2: each NIC found by its MAC; a static address where IPAM gave one, else DHCP."""
    ethernets: dict[str, Any] = {}
    for index, nic in enumerate(nics):
        entry: dict[str, Any] = {"match": {"macaddress": nic.mac}, "set-name": f"eth{index}"}
        if nic.ip and nic.prefix_length is not None:
            entry["addresses"] = [f"{nic.ip}/{nic.prefix_length}"]
            if nic.gateway:
                # The default route as gateway4/gateway6, not as a route "to: 0.0.0.0/0": cloud-init's
                # ENI renderer (images with ifupdown) writes routes as `post-up route add`, which needs
                # net-tools, and a gateway as ifupdown's own `gateway` line; netplan reads gateway4
                # (deprecated, still read) and refuses a second default route next to it.
                entry["gateway6" if ":" in nic.gateway else "gateway4"] = nic.gateway
            if nic.dns_servers:
                entry["nameservers"] = {"addresses": list(nic.dns_servers)}
        else:
            entry["dhcp4"] = True
        ethernets[f"nic{index}"] = entry
    return {"version": 2, "ethernets": ethernets}


def seed_documents(
    *,
    instance_id: str,
    hostname: str,
    user_data: str,
    ssh_authorized_keys: list[str],
    nics: list[SeedNic],
    network_override: dict[str, Any] | None = None,
) -> dict[str, bytes]:
    """The seed's files by name. The instance id is the VM's uid, so cloud-init runs its
    first-boot modules once per VM, not once per seed rebuild."""
    meta: dict[str, Any] = {"instance-id": instance_id, "local-hostname": hostname}
    if ssh_authorized_keys:
        meta["public-keys"] = list(ssh_authorized_keys)
    network = network_override if network_override is not None else network_config(nics)
    return {
        "meta-data": _json(meta),
        "user-data": (user_data or "#cloud-config\n{}\n").encode(),
        "network-config": _json(network),
    }


def seed_digest(documents: dict[str, bytes]) -> str:
    """A short digest of the documents: the seed is rebuilt when it changes."""
    digest = hashlib.sha256()
    for name in sorted(documents):
        digest.update(name.encode() + b"\0" + documents[name] + b"\0")
    return digest.hexdigest()[:16]


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


_V2_SECTIONS = ("ethernets", "bonds", "bridges", "vlans", "wifis")


def static_addresses(config: Any) -> list[tuple[str, str | None, str]]:
    """Each static address a network config (version 1 or 2) sets: where, the MAC its
    interface is matched by (None: by name, or a bond, a bridge...), and the address.
    What is not of the shape cloud-init reads is skipped: cloud-init refuses it anyway."""
    found: list[tuple[str, str | None, str]] = []
    if not isinstance(config, dict):
        return found
    for section in _V2_SECTIONS:
        interfaces = config.get(section)
        for name, entry in interfaces.items() if isinstance(interfaces, dict) else ():
            if not isinstance(entry, dict):
                continue
            match = entry.get("match")
            mac = match.get("macaddress") if isinstance(match, dict) and section == "ethernets" else None
            addresses = entry.get("addresses") or []
            for address in addresses if isinstance(addresses, list | dict) else []:
                found.append((f"{section}.{name}", mac if isinstance(mac, str) else None, str(address)))
    items = config.get("config")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        mac = item.get("mac_address") if item.get("type") == "physical" else None
        subnets = item.get("subnets")
        for subnet in subnets if isinstance(subnets, list) else []:
            if isinstance(subnet, dict) and "address" in subnet:
                found.append(
                    (f"config[{index}]", mac if isinstance(mac, str) else None, str(subnet["address"]))
                )
    return found


def ipam_bypass(config: Any, nics: list[tuple[str, str | None]]) -> str | None:
    """Why a network config override would give the guest an address IPAM did not give it, or None.

    ``nics``: each NIC's MAC and its IPAM address (None: its network has no subnet, so no
    IPAM). A static address is allowed only on an interface matched by the MAC of one of
    the VM's NICs, and on a NIC with an IPAM address only that address: otherwise the guest
    would take an address IPAM may hand to another VM."""
    by_mac = {mac.lower(): ip for mac, ip in nics}
    for where, mac, address in static_addresses(config):
        ip = address.split("/")[0].strip()
        if mac is None or mac.lower() not in by_mac:
            return (
                f"{where} sets the address {address} on an interface not matched by the MAC of one "
                "of the VM's NICs (match: {macaddress: ...}); addresses on the VM's networks come from IPAM"
            )
        allocated = by_mac[mac.lower()]
        if allocated is not None and ip != allocated:
            return (
                f"{where} sets the address {address} for MAC {mac}, whose NIC has {allocated} from IPAM: "
                "leave addresses out of network_config (the generated one sets IPAM's) or use that one"
            )
    return None
