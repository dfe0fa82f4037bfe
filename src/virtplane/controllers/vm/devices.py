"""Hot-plug: a running VM's disks and NICs brought to its spec, one device per look.

An operator edits ``spec.disks`` / ``spec.nics`` of a running VM (the API has admitted
the change: no boot disk taken out, networks and pools the host has). Each look reads
the running domain's devices and makes one change: attach what the spec lists and the
domain lacks (the volume must be attached to the VM first, ``controllers.attachments``),
else ask the guest to release what the spec no longer lists. A detach is asynchronous:
the device stays until the guest lets it go, so it is recorded on the VM first
(``status.device_changes``, durable before the request: DESIGN.md §1) and shown as
Detaching, until the domain no longer has it or ``vm.hotplug.detach_timeout_s`` passes
(DetachTimedOut: the condition says so, nothing is asked again; a restart of the VM
defines it from the spec). ``status.devices_generation`` records the generation whose
devices the domain has, which releases a detached volume (``domain.attachments``).
When the devices agree, a changed NoCloud seed (new NICs, new addresses) is written and
put into the guest's seed CD-ROM, so a reboot reads what the VM has now.
"""

from __future__ import annotations

import logging

from virtplane.controllers.lookup import disk_attachment, vm_nics
from virtplane.controllers.seed import place_seed, seed_volume
from virtplane.controllers.vm.durable import DurablePoint
from virtplane.controllers.vm.state import VMState
from virtplane.controllers.vm.steps import POLL_TRANSITION_S, POLL_UNSCHEDULABLE_S
from virtplane.domain.conditions import VMCondition, remove_condition, set_condition
from virtplane.domain.phases import LIVE_STATES, DomainState
from virtplane.domain.resources import Capability, DeviceChange, DeviceChangeState, DeviceKind
from virtplane.drivers.base import DiskAttachment, HypervisorDriver, LiveDevices, NicAttachment
from virtplane.drivers.errors import DriverError
from virtplane.reconcile.types import Result

log = logging.getLogger("virtplane.controllers.vm")

NEXT_CHANGE_S = 0.01  # one device per look, the next look at once


def _ready(state: VMState, reason: str, message: str = "", ok: bool = False) -> None:
    state.status.conditions = set_condition(
        state.status.conditions, VMCondition.DEVICES_READY, ok, reason, message, now=state.now
    )


async def devices(state: VMState) -> Result | None:
    info, status = state.info, state.status
    if info is None or info.state not in LIVE_STATES:  # off: its next definition comes from the spec
        status.device_changes = []
        status.conditions = remove_condition(status.conditions, VMCondition.DEVICES_READY)
        return None
    if info.state is not DomainState.RUNNING or state.intents.held_by:
        return None  # booting, stopping, paused or held: looked at again once running
    driver = (await state.host()).driver
    if driver is None:
        return None
    try:
        live = await driver.live_devices(state.domain)
        if live is None:
            return None
        return await _bring_to_spec(state, driver, live)
    except DriverError as exc:
        _ready(state, "HotplugFailed", str(exc))
        return Result(requeue_after=POLL_UNSCHEDULABLE_S)


async def _bring_to_spec(state: VMState, driver: HypervisorDriver, live: LiveDevices) -> Result | None:
    vm, status, cache = state.vm, state.status, state.ctx.cache
    wanted: dict[str, DiskAttachment] = {}
    listed: dict[str, str] = {}  # path -> volume, of every volume the spec lists
    waiting = ""
    for disk in vm.spec.disks:
        volume = cache.volume(disk.volume)
        if volume is not None and volume.status.path:
            listed[volume.status.path] = disk.volume
        attachment, problem = disk_attachment(cache, vm.metadata.name, disk)
        if attachment is not None:
            wanted[attachment.path] = attachment
        elif volume is None or volume.status.path not in live.disks:
            waiting = waiting or problem
    names = {v.status.path: v.metadata.name for v in cache.volumes() if v.status.path in live.disks}
    nics, missing = vm_nics(cache, vm)
    wanted_nics = {nic.mac: nic for nic in nics}
    if missing:  # a network not (or no longer) known here: its NICs are neither added nor taken out
        wanted_nics = {mac: NicAttachment(mac=mac, bridge=None) for mac in live.nics}
        waiting = waiting or missing

    # what was asked back and is gone now
    gone = [c for c in status.device_changes if _key(c, names, live) is None]
    for change in gone:
        state.ctx.event(vm, "Detached", f"{change.kind.value} {change.name} detached from the running VM")
    status.device_changes = [c for c in status.device_changes if c not in gone]

    attach_disks = [d for path, d in wanted.items() if path not in live.disks]
    attach_nics = [n for mac, n in wanted_nics.items() if mac not in live.nics]
    detach_disks = [p for p in live.disks if p not in listed]
    detach_nics = [m for m in live.nics if m not in wanted_nics]
    changes = [d.volume for d in attach_disks] + [n.mac for n in attach_nics]
    changes += [names.get(p, p) for p in detach_disks] + detach_nics
    if changes and Capability.HOTPLUG not in driver.capabilities:
        _ready(
            state,
            "HotplugUnsupported",
            f"host {status.host} cannot attach or detach devices of a running domain: the change of "
            f"{', '.join(changes)} applies at the VM's next start",
        )
        return None
    if live.disks and live.disks[0] in detach_disks:
        # the API refuses this; a spec written while the VM was off and started since gets here
        _ready(
            state,
            "BootDisk",
            f"volume {names.get(live.disks[0], live.disks[0])} is the boot disk of the running domain: "
            "it is not detached; the change applies at the VM's next start",
        )
        return None
    try:
        if attach_disks:
            await driver.attach_disk(state.domain, attach_disks[0])
            state.ctx.event(vm, "Attached", f"disk {attach_disks[0].volume} attached to the running VM")
            return Result(requeue_after=NEXT_CHANGE_S)
        if attach_nics:
            nic = attach_nics[0]
            await driver.attach_nic(state.domain, nic)
            state.ctx.event(
                vm, "Attached", f"NIC {nic.mac} on network {nic.network} attached to the running VM"
            )
            return Result(requeue_after=NEXT_CHANGE_S)
    except DriverError as exc:
        _ready(state, "AttachRefused", str(exc))
        state.ctx.event(vm, "AttachRefused", str(exc), warning=True)
        return Result(requeue_after=POLL_UNSCHEDULABLE_S)
    pending = [(DeviceKind.DISK, names.get(p, p), p) for p in detach_disks]
    pending += [(DeviceKind.NIC, mac, mac) for mac in detach_nics]
    if pending:
        return await _detach(state, driver, pending)
    if waiting:
        _ready(state, "Waiting", waiting)
        return None
    if Capability.HOTPLUG in driver.capabilities and not await _seed(state, driver):
        return Result(requeue_after=POLL_UNSCHEDULABLE_S)
    _ready(state, "Ready", ok=True)
    status.devices_generation = vm.metadata.generation
    return None


def _key(change: DeviceChange, names: dict[str, str], live: LiveDevices) -> str | None:
    """The live device ``change`` is about; None when the domain no longer has it."""
    if change.kind is DeviceKind.NIC:
        return change.name if change.name in live.nics else None
    if change.name in live.disks:  # a disk of no volume the store knows, by its path
        return change.name
    return next((path for path, name in names.items() if name == change.name), None)


async def _detach(
    state: VMState, driver: HypervisorDriver, pending: list[tuple[DeviceKind, str, str]]
) -> Result | None:
    """Ask for the first device not asked yet; say which are still held and for how long."""
    status, timeout = state.status, state.ctx.settings.get_float("vm.hotplug.detach_timeout_s")
    recorded = {(c.kind, c.name): c for c in status.device_changes}
    for kind, name, key in pending:
        if (kind, name) in recorded:
            continue
        status.device_changes = [
            *status.device_changes,
            DeviceChange(kind=kind, name=name, state=DeviceChangeState.DETACHING, since=state.now),
        ]
        await state.durable(DurablePoint.DETACH)
        try:
            if kind is DeviceKind.DISK:
                await driver.detach_disk(state.domain, key)
            else:
                await driver.detach_nic(state.domain, key)
        except DriverError as exc:
            status.device_changes = [c for c in status.device_changes if (c.kind, c.name) != (kind, name)]
            _ready(state, "DetachRefused", f"{kind.value} {name}: {exc}")
            state.ctx.event(state.vm, "DetachRefused", f"{kind.value} {name}: {exc}", warning=True)
            return Result(requeue_after=POLL_UNSCHEDULABLE_S)
        state.ctx.event(state.vm, "Detaching", f"{kind.value} {name}: asked the guest to release it")
        _ready(state, "Detaching", f"{kind.value} {name}: waiting for the guest to release it")
        return Result(requeue_after=NEXT_CHANGE_S)  # the next device is asked at once
    changes = []
    for change in status.device_changes:
        held_s = (state.now - change.since).total_seconds()
        if change.state is DeviceChangeState.DETACHING and held_s >= timeout:
            change = change.model_copy(
                update={
                    "state": DeviceChangeState.DETACH_TIMED_OUT,
                    "message": f"the guest did not release it within {timeout:g} s",
                }
            )
            state.ctx.event(
                state.vm,
                "DetachTimedOut",
                f"{change.kind.value} {change.name}: {change.message}",
                warning=True,
            )
        changes.append(change)
    status.device_changes = changes
    stuck = [c for c in changes if c.state is DeviceChangeState.DETACH_TIMED_OUT]
    if stuck:
        _ready(
            state,
            "DetachTimedOut",
            "; ".join(f"{c.kind.value} {c.name}: {c.message}" for c in stuck)
            + ": it stays attached until the guest lets it go or the VM restarts",
        )
        return Result(requeue_after=POLL_UNSCHEDULABLE_S)
    _ready(
        state,
        "Detaching",
        "; ".join(f"{c.kind.value} {c.name}: waiting for the guest to release it" for c in changes),
    )
    return Result(requeue_after=POLL_TRANSITION_S)


async def _seed(state: VMState, driver: HypervisorDriver) -> bool:
    """The seed the VM asks for now in its guest's CD-ROM (written and recorded first); whether
    it is there. The last seed recorded is the one in the CD-ROM (a definition keeps only its
    own); none recorded: the domain was defined without a seed, and its next definition adds it."""
    current = seed_volume(state.ctx.cache, state.vm)
    if current is None or not state.seeds or state.seeds[-1] == current:
        return True
    if current not in state.seeds:  # recorded before it is written, deleted when no longer used
        state.seeds = [current, *state.seeds]
        await state.durable(DurablePoint.SEED)
    try:
        path = await place_seed(state.ctx.cache, state.vm, driver)
        if path is not None:
            await driver.change_seed(state.domain, path)
    except DriverError as exc:
        message = f"the seed with the VM's NICs could not be put in its CD-ROM: {exc}"
        _ready(state, "SeedNotChanged", message)
        state.ctx.event(state.vm, "SeedNotChanged", message, warning=True)
        return False
    state.seeds = [*(seed for seed in state.seeds if seed != current), current]  # now in the CD-ROM
    state.ctx.event(state.vm, "SeedChanged", f"the guest's seed now says what the VM has ({current.file})")
    return True


__all__ = ["devices"]
