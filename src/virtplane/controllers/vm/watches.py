"""The VM controller's watches: the changes of other objects that make a VM look again
(``controllers.watch``)."""

from __future__ import annotations

from virtplane.controllers.host import networks_changed, reachability_changed, room_freed
from virtplane.controllers.vm.recovery import slot_queue
from virtplane.controllers.watch import Watch, itself, name_of
from virtplane.domain.intents import read_recovery
from virtplane.domain.networks import Network
from virtplane.domain.resources import (
    Host,
    Image,
    Resource,
    VirtualMachine,
    Volume,
)
from virtplane.reconcile.types import Request
from virtplane.runtime.cache import Cache

__all__ = ["WATCHES"]

KIND = VirtualMachine.KIND


def _vms_using_volume(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A disk became ready, moved or went away."""
    return [Request(KIND, vm) for vm in cache.vms_using_volume(name_of(old, new))]


def _vms_booting_from(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A boot kernel or initrd became ready (or not)."""
    image = name_of(old, new)
    return [
        Request(KIND, vm.metadata.name)
        for vm in cache.vms()
        if vm.spec.boot is not None and image in (vm.spec.boot.kernel, vm.spec.boot.initrd)
    ]


def _vms_on_host(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """The host's state or connection changed: a reconnect may show domains that changed
    meanwhile, a host that went away leaves its VMs to fencing."""
    if not reachability_changed(old, new):
        return []
    return [Request(KIND, vm.metadata.name) for vm in cache.vms_on_host(name_of(old, new))]


def _vms_waiting_for_a_host(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """VMs without a host may fit now: a host came, came back, has more room or other networks."""
    if not (reachability_changed(old, new) or room_freed(old, new) or networks_changed(old, new)):
        return []
    return [Request(KIND, vm) for vm in cache.unscheduled_vms()]


def _vms_on_network(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A network the VM's NICs use changed (its status.nics, or a host that has it now)."""
    network = name_of(old, new)
    return [
        Request(KIND, vm.metadata.name)
        for vm in cache.vms()
        if any(nic.network == network for nic in vm.spec.nics)
    ]


def _vms_waiting_for_a_slot(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A VM's recovery ended (it runs, is no longer meant to, or went): its slot, or its place
    in the queue, is free, and the others waiting for one of the cluster look again."""
    before = read_recovery(old.metadata.annotations) if isinstance(old, VirtualMachine) else None
    after = read_recovery(new.metadata.annotations) if isinstance(new, VirtualMachine) else None
    if before is None or after is not None:
        return []
    name = name_of(old, new)
    waiting = slot_queue(cache, before.cluster)[0]
    return [Request(KIND, vm.name) for vm in waiting if vm.name != name]


# No watch on operations: an operation asks through an intent written on the VM itself (woken
# by ``itself``), and the VM's reconcile reads no operation; waking it on every write of one
# only put no-op reconciles in front of the operation's next step.
# Not woken by its own reconcile's writes: every write is followed by a verdict that says when
# to look again (a transition polls), and the look after it only repeated the reconcile that
# had just run (a cold start took 4 looks per VM, now 3).
WATCHES = (
    itself(KIND, after_own_writes=False),
    Watch(Volume.KIND, _vms_using_volume),
    Watch(Image.KIND, _vms_booting_from),
    Watch(Host.KIND, _vms_on_host),
    Watch(Host.KIND, _vms_waiting_for_a_host),
    Watch(Network.KIND, _vms_on_network),
    Watch(KIND, _vms_waiting_for_a_slot),
)
