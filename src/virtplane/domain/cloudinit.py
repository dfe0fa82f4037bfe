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

__all__ = ["SeedNic", "seed_digest", "seed_documents"]


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
