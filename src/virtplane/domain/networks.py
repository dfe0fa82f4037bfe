"""Networks, a VM's NICs and its first-boot configuration (issue 14).

A ``Network`` (admin) is an existing Linux bridge on the hosts (kind ``bridge``,
with an optional VLAN tag and a subnet for IPAM) or QEMU's user-mode network
(kind ``user``, simulated hosts only: see docs/decisions.md). A VM lists its NICs
in ``spec.nics``; the API fills in each NIC's MAC and address when it is created,
as Kubernetes fills in a Service's cluster IP, so both stay the VM's for its life.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator

from virtplane.domain.base import Condition, FreeJson, Name, Resource, Strict
from virtplane.domain.ipam import Claim, address_refusal, ip_claim, mac_claim, normalise_mac
from virtplane.domain.names import BRIDGE

__all__ = [
    "AddressRange",
    "CloudInit",
    "Network",
    "NetworkAllocation",
    "NetworkKind",
    "NetworkSpec",
    "NetworkStatus",
    "Nic",
    "NicStatus",
    "check_nics",
    "host_lacks",
    "nic_claims",
    "nic_statuses",
]

Mac = Annotated[str, AfterValidator(normalise_mac)]


def _text(value: Any) -> Any:
    # ipaddress also takes integers (and so booleans): an address is written as text
    if not isinstance(value, str | IPv4Address | IPv4Network):
        raise ValueError("write an address as text, e.g. 10.0.0.1 or 10.0.0.0/24")
    return value


Address = Annotated[IPv4Address, BeforeValidator(_text)]
Subnet = Annotated[IPv4Network, BeforeValidator(_text)]

MIN_PREFIX, MAX_PREFIX = 16, 30
"""Subnets from /16 (65534 addresses) to /30: IPAM walks the range, so it stays bounded."""


class NetworkKind(StrEnum):
    BRIDGE = "bridge"
    USER = "user"


class AddressRange(Strict):
    start: Address
    end: Address


class NetworkSpec(Strict):
    kind: NetworkKind
    bridge: str | None = Field(
        default=None,
        pattern=BRIDGE.anchored,
        description="kind bridge: the Linux bridge on each host (an interface name, at most 15 characters).",
    )
    vlan: int | None = Field(
        default=None, ge=1, le=4094, description="kind bridge: the VLAN tag of the NICs."
    )
    cluster: Name | None = Field(default=None, description="The network is on the hosts of this cluster.")
    hosts: list[Name] = Field(default_factory=list, max_length=1024, description="Or on these hosts.")
    subnet: Subnet | None = Field(default=None, description="kind bridge: the IPv4 subnet for IPAM.")
    gateway: Address | None = None
    range: AddressRange | None = Field(
        default=None, description="Addresses IPAM hands out (default: every host address of the subnet)."
    )
    dns_servers: list[Address] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _check(self) -> NetworkSpec:
        if not self.cluster and not self.hosts:
            raise ValueError("a network needs spec.cluster or spec.hosts")
        if self.kind is NetworkKind.BRIDGE and not self.bridge:
            raise ValueError("a bridge network needs spec.bridge, the name of the bridge on the hosts")
        if self.kind is NetworkKind.USER:
            if self.bridge or self.vlan is not None:
                raise ValueError("a user network takes no spec.bridge or spec.vlan")
            if self.subnet or self.gateway or self.range or self.dns_servers:
                raise ValueError("a user network has QEMU's own addresses: no subnet, gateway, range or DNS")
        if self.subnet is None:
            if self.gateway or self.range or self.dns_servers:
                raise ValueError("spec.gateway, spec.range and spec.dns_servers need spec.subnet")
            return self
        if not MIN_PREFIX <= self.subnet.prefixlen <= MAX_PREFIX:
            raise ValueError(
                f"spec.subnet must be a /{MIN_PREFIX} to /{MAX_PREFIX}, not /{self.subnet.prefixlen}"
            )
        if self.gateway is not None:
            refusal = address_refusal(self.gateway, self.subnet, None)
            if refusal:
                raise ValueError(f"spec.gateway: {refusal}")
        if self.range is not None:
            for end in (self.range.start, self.range.end):
                refusal = address_refusal(end, self.subnet, None)
                if refusal:
                    raise ValueError(f"spec.range: {refusal}")
            if self.range.start > self.range.end:
                raise ValueError("spec.range: start is after end")
        return self


class NetworkAllocation(BaseModel):
    ip: str | None = None
    mac: str
    vm: str


class NetworkStatus(BaseModel):
    hosts: list[str] = Field(default_factory=list, description="Hosts that have the network (its bridge).")
    allocations: list[NetworkAllocation] = Field(
        default_factory=list, description="The NICs on the network: their VM, MAC and address."
    )
    addresses_in_use: int = 0
    addresses_free: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    message: str = ""


class Network(Resource):
    KIND: ClassVar[str] = "Network"
    PLURAL: ClassVar[str] = "networks"
    spec: NetworkSpec
    status: NetworkStatus = Field(default_factory=NetworkStatus)


class Nic(Strict):
    network: Name
    mac: Mac | None = Field(default=None, description="Chosen, or derived from the VM's uid when created.")
    ip: Address | None = Field(
        default=None,
        description="Requested, or allocated from the network's range (bridge networks with a subnet).",
    )


class NicStatus(BaseModel):
    network: str
    mac: str
    ip: str | None = None
    prefix_length: int | None = None
    gateway: str | None = None


def _check_ssh_key(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("an SSH key is one line")
    return value


class CloudInit(Strict):
    user_data: str = Field(default="", max_length=64 * 1024, description="cloud-init user data, as given.")
    ssh_authorized_keys: list[Annotated[str, AfterValidator(_check_ssh_key)]] = Field(
        default_factory=list, max_length=64
    )
    network_config: FreeJson | None = Field(
        default=None, description="A network config (version 2) to use instead of the generated one."
    )


def host_lacks(
    network: NetworkSpec, host: str, cluster: str, bridges: frozenset[str], user_networks: bool
) -> str | None:
    """Why a host does not have ``network`` (the one rule placement and the Network's status use), or None.

    A bridge network is on the hosts of its scope that report its bridge; a user network
    on those whose driver offers QEMU's user network (simulated hosts only)."""
    in_scope = host in network.hosts or (network.cluster is not None and cluster == network.cluster)
    if not in_scope:
        return "not in the network's cluster or hosts"
    if network.kind is NetworkKind.BRIDGE and network.bridge not in bridges:
        return f"has no bridge {network.bridge}"
    if network.kind is NetworkKind.USER and not user_networks:
        return "its driver offers no user network"
    return None


def nic_claims(nics: Sequence[Nic]) -> list[Claim]:
    """What NICs hold alone: each MAC, and each address on its network."""
    claims = [Claim(mac_claim(), nic.mac) for nic in nics if nic.mac]
    claims += [Claim(ip_claim(nic.network), str(nic.ip)) for nic in nics if nic.ip]
    return claims


def nic_statuses(nics: list[Nic], networks: dict[str, NetworkSpec]) -> list[NicStatus]:
    """``status.nics``: each NIC's MAC and address (as the API filled them in) with its subnet's
    prefix length and gateway, which the guest's network config needs."""
    statuses = []
    for nic in nics:
        spec = networks.get(nic.network)
        subnet = spec.subnet if spec else None
        statuses.append(
            NicStatus(
                network=nic.network,
                mac=nic.mac or "",
                ip=str(nic.ip) if nic.ip else None,
                prefix_length=subnet.prefixlen if subnet and nic.ip else None,
                gateway=str(spec.gateway) if spec and spec.gateway and nic.ip else None,
            )
        )
    return statuses


def check_nics(nics: list[Nic]) -> list[Nic]:
    """The NICs of one VM: no MAC twice, no address twice on one network."""
    macs = [n.mac for n in nics if n.mac]
    if len(macs) != len(set(macs)):
        raise ValueError("a MAC is listed twice in spec.nics")
    addresses = [(n.network, n.ip) for n in nics if n.ip]
    if len(addresses) != len(set(addresses)):
        raise ValueError("an address is listed twice on one network in spec.nics")
    return nics
