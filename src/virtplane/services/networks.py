"""Admission of networks and of a VM's NICs: references, overlaps, addresses and MACs.

The API fills in each NIC's MAC and address here, before the write, and the store
writes the VM together with its claims on them (``store.claims``): a value two
requests chose at once is stored for one of them only; the other gets ``ClaimTaken``
and the API runs admission again (a requested value then fails with its reason).
Refusals are domain errors (``Invalid`` 422, ``Refused`` 409 through the API's table).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from ipaddress import IPv4Address

from virtplane.domain.cloudinit import ipam_bypass
from virtplane.domain.errors import Invalid, Refused
from virtplane.domain.ipam import address_refusal, derive_mac, first_free, host_range, ip_claim, mac_claim
from virtplane.domain.networks import Network, Nic, nic_claims
from virtplane.domain.resources import VirtualMachine
from virtplane.runtime.cache import Cache
from virtplane.store.store import Store

MAC_ATTEMPTS = 64
"""Derived MACs tried per NIC before giving up (24 bits each: a collision is rare already)."""


def scopes_meet(a: Network, b: Network, cluster_of: dict[str, str]) -> bool:
    """Whether two networks can be on one host: same cluster, a shared host, or a host in the other's cluster."""
    if a.spec.cluster and a.spec.cluster == b.spec.cluster:
        return True
    if set(a.spec.hosts) & set(b.spec.hosts):
        return True
    return any(cluster_of.get(h) == b.spec.cluster for h in a.spec.hosts if b.spec.cluster) or any(
        cluster_of.get(h) == a.spec.cluster for h in b.spec.hosts if a.spec.cluster
    )


def _earlier_nics(nics: Sequence[Nic], before: Sequence[Nic]) -> list[Nic | None]:
    """Which stored NIC each written one is: the one with its MAC, else the first one left on
    its network (in order). So a NIC written without its MAC keeps it, and its address, when
    another NIC before it is taken out (hot-plug detaches the one that left, no other)."""
    left = list(before)
    olds: list[Nic | None] = []
    for nic in nics:
        same = next((o for o in left if nic.mac and (o.mac, o.network) == (nic.mac, nic.network)), None)
        same = same or next((o for o in left if not nic.mac and o.network == nic.network), None)
        if same is not None:
            left.remove(same)
        olds.append(same)
    return olds


class NetworkAdmission:
    def __init__(self, store: Store, cache: Cache) -> None:
        self.store = store
        self.cache = cache

    # -- networks

    def admit_network(self, network: Network, current: Network | None) -> None:
        if current is not None:
            for field in ("kind", "subnet"):
                if getattr(current.spec, field) != getattr(network.spec, field):
                    raise Invalid("Immutable", f"spec.{field} of a network cannot change")
        subnet = network.spec.subnet
        if subnet is None:
            return
        cluster_of = {h.metadata.name: h.spec.cluster for h in self.cache.hosts()}
        for other in self.store.list_objects(Network):
            if other.metadata.name == network.metadata.name or other.spec.subnet is None:
                continue
            if subnet.overlaps(other.spec.subnet) and scopes_meet(network, other, cluster_of):
                raise Invalid(
                    "SubnetOverlap",
                    f"subnet {subnet} overlaps {other.spec.subnet} of network {other.metadata.name} "
                    "on the same hosts",
                )

    def network_users(self, name: str) -> list[str]:
        return sorted(
            vm.metadata.name for vm in self.cache.vms() if any(n.network == name for n in vm.spec.nics)
        )

    # -- a VM's NICs

    def admit_nics(self, vm: VirtualMachine, current: VirtualMachine | None) -> None:
        """Check the NICs and fill in each one's MAC and address (in place)."""
        if not vm.spec.nics:
            return
        if not vm.metadata.uid:  # a new VM: its uid now, so that derived MACs come from it
            vm.metadata.uid = str(uuid.uuid4())
        before = current.spec.nics if current is not None else []
        mine = {(c.scope, c.value) for c in nic_claims(current.spec.nics)} if current is not None else set()
        olds = _earlier_nics(vm.spec.nics, before)
        nics: list[Nic] = []
        for index, nic in enumerate(vm.spec.nics):
            nics.append(self._admit_nic(vm, index, nic, olds[index], mine, nics))
        vm.spec.nics = nics
        override = vm.spec.cloud_init.network_config if vm.spec.cloud_init else None
        bypass = ipam_bypass(override, [(n.mac or "", str(n.ip) if n.ip else None) for n in nics])
        if override is not None and bypass is not None:
            raise Invalid("NetworkConfigBypassesIpam", f"spec.cloud_init.network_config: {bypass}")

    def _taken(self, scope: str, mine: set[tuple[str, str]]) -> set[str]:
        return {
            c.value
            for c, _ in self.store.claims(scope)
            if c.scope == scope and (c.scope, c.value) not in mine
        }

    def _admit_nic(
        self,
        vm: VirtualMachine,
        index: int,
        nic: Nic,
        old: Nic | None,
        mine: set[tuple[str, str]],
        earlier: Sequence[Nic],
    ) -> Nic:
        field = f"spec.nics[{index}]"
        network = self.store.find(Network, nic.network)
        if network is None:
            raise Invalid("NetworkNotFound", f"{field}: network {nic.network} does not exist")
        mac = nic.mac or (old.mac if old else None)
        macs_taken = self._taken(mac_claim(), mine) | {n.mac for n in earlier if n.mac}
        if mac is None:
            mac = next(
                (
                    m
                    for a in range(MAC_ATTEMPTS)
                    if (m := derive_mac(vm.metadata.uid, index, a)) not in macs_taken
                ),
                None,
            )
            if mac is None:
                raise Refused("MacInUse", f"{field}: no free MAC could be derived; choose one")
        elif mac in macs_taken:
            raise Refused("MacInUse", f"{field}: MAC {mac} is in use by another NIC")
        ip = nic.ip or (old.ip if old else None)
        subnet = network.spec.subnet
        if subnet is None:
            if nic.ip is not None:
                raise Invalid(
                    "NoAddressing", f"{field}: network {nic.network} has no subnet, so no addresses"
                )
            return Nic(network=nic.network, mac=mac)
        taken = {IPv4Address(v) for v in self._taken(ip_claim(nic.network), mine)}
        taken |= {n.ip for n in earlier if n.network == nic.network and n.ip}
        if ip is None:
            bounds = network.spec.range
            start, end = host_range(subnet, bounds.start if bounds else None, bounds.end if bounds else None)
            ip = first_free(start, end, taken, [network.spec.gateway] if network.spec.gateway else [])
            if ip is None:
                raise Refused("NetworkFull", f"{field}: network {nic.network} has no free address left")
        else:
            refusal = address_refusal(ip, subnet, network.spec.gateway)
            if refusal:
                reason = "AddressOutsideSubnet" if ip not in subnet else "AddressReserved"
                raise Invalid(reason, f"{field}: {refusal}")
            if ip in taken:
                raise Refused("AddressInUse", f"{field}: {ip} is in use on network {nic.network}")
        return Nic(network=nic.network, mac=mac, ip=ip)
