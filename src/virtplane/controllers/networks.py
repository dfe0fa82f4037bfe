"""Networks: which hosts have each one, and which NICs use it (``Network.status``).

A host has a network when it is in the network's scope and reports its bridge (or,
for a user network, its driver offers one): ``domain.networks.host_lacks``, the same
rule placement applies. The NICs come from the VMs' specs, where the API wrote each
NIC's MAC and address along with its claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.host import networks_changed, reachability_changed
from virtplane.controllers.registration import Registration
from virtplane.controllers.watch import Watch, itself
from virtplane.domain.ipam import Claim, claim_reason, host_range, mac_claim
from virtplane.domain.networks import Network, NetworkAllocation, NetworkStatus, Nic, host_lacks, nic_claims
from virtplane.domain.resources import Capability, Host, Resource, VirtualMachine
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache
from virtplane.store.store import Store


def vm_claims(vm: VirtualMachine) -> list[Claim]:
    return nic_claims(vm.spec.nics)


@dataclass(frozen=True)
class NicConflict:
    index: int
    reason: str  # NetworkNotFound, MacInUse, AddressInUse
    message: str


def nic_conflicts(store: Store, vm_uid: str, nics: Sequence[Nic]) -> list[NicConflict]:
    """The NICs (of a snapshot, say) that the VM ``vm_uid`` cannot have now: their network is
    gone, or another object holds their MAC or address."""
    held = {c: h for c, h in store.claims("") if h.uid != vm_uid}
    conflicts = []
    for index, nic in enumerate(nics):
        if store.find(Network, nic.network) is None:
            conflicts.append(NicConflict(index, "NetworkNotFound", f"network {nic.network} does not exist"))
            continue
        for claim in nic_claims([nic]):
            holder = held.get(claim)
            if holder is not None:
                what = (
                    f"MAC {claim.value}"
                    if claim.scope == mac_claim()
                    else f"address {claim.value} on network {nic.network}"
                )
                conflicts.append(
                    NicConflict(
                        index, claim_reason(claim), f"{what} is in use by {holder.kind} {holder.name}"
                    )
                )
                break
    return conflicts


class NetworkReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, req: Request) -> Result | None:
        network = self.ctx.read(Network, req.name, to_change=True)
        if network is None:
            return None
        status = network_status(self.ctx, network)
        if status != network.status:
            network.status = status
            await self.ctx.write(network)
        return None


def network_status(ctx: ControllerContext, network: Network) -> NetworkStatus:
    spec = network.spec
    hosts = sorted(
        h.metadata.name
        for h in ctx.cache.hosts()
        if host_lacks(
            spec,
            h.metadata.name,
            h.spec.cluster,
            frozenset(h.status.bridges),
            Capability.USER_NETWORK in h.status.capabilities,
        )
        is None
    )
    allocations = sorted(
        (
            NetworkAllocation(ip=str(nic.ip) if nic.ip else None, mac=nic.mac or "", vm=vm.metadata.name)
            for vm in ctx.cache.vms()
            for nic in vm.spec.nics
            if nic.network == network.metadata.name
        ),
        key=lambda a: (a.vm, a.mac),
    )
    in_use = sum(1 for a in allocations if a.ip)
    free: int | None = None
    if spec.subnet is not None:
        start, end = host_range(
            spec.subnet, spec.range.start if spec.range else None, spec.range.end if spec.range else None
        )
        size = int(end) - int(start) + 1
        gateway_inside = spec.gateway is not None and start <= spec.gateway <= end
        inside = sum(1 for a in allocations if a.ip and start <= IPv4Address(a.ip) <= end)
        free = max(0, size - inside - int(gateway_inside))
    message = "" if hosts else "no host has this network yet"
    return NetworkStatus(
        hosts=hosts, allocations=allocations, addresses_in_use=in_use, addresses_free=free, message=message
    )


# --------------------------------------------------------------------------- watches


def _every_network(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A host came, went away or reports other bridges: which hosts have each network."""
    if not (reachability_changed(old, new) or networks_changed(old, new) or new is None):
        return []
    return [Request(Network.KIND, n.metadata.name) for n in cache.networks()]


def _networks_of_vm(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A VM's NICs are a network's allocations: the networks it uses or used."""
    names = {nic.network for vm in (old, new) if isinstance(vm, VirtualMachine) for nic in vm.spec.nics}
    return [Request(Network.KIND, name) for name in sorted(names)]


WATCHES = (
    itself(Network.KIND),
    Watch(Host.KIND, _every_network),
    Watch(VirtualMachine.KIND, _networks_of_vm),
)

CONTROLLER = Registration(Network.KIND, lambda parts: NetworkReconciler(parts.ctx), WATCHES, workers=2)
