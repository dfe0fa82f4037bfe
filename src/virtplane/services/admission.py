"""Checks on API writes that need more than field validation: references, applicability, immutability.

The API calls these before writing; the controllers re-check what they act on,
since the world may change between the two. A refusal is a domain error
(``domain.errors``: ``Invalid`` for a reference that cannot be used, ``Refused`` for a
conflict with the state things are in); the API maps it to its HTTP status.
"""

from __future__ import annotations

from functools import partial

from virtplane.domain.attachments import attached_elsewhere, users_of
from virtplane.domain.backup_restore import saved_disk_of_backup, spec_refusal
from virtplane.domain.clones import check_template_change
from virtplane.domain.errors import DomainError, Invalid, Refused
from virtplane.domain.intents import read_intents
from virtplane.domain.ipam import Claim
from virtplane.domain.linked import linked_refusal, saved_disk_refusal
from virtplane.domain.networks import Network, nic_claims
from virtplane.domain.operations import active_before, admit
from virtplane.domain.pools import pool_driver_name, pool_path, pools_overlap
from virtplane.domain.resources import (
    BackupPolicy,
    BackupTarget,
    Host,
    Image,
    ImageKind,
    ImagePhase,
    PoolContent,
    Resource,
    Secret,
    StoragePool,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    Volume,
)
from virtplane.runtime.cache import Cache
from virtplane.services.deletion_guards import DELETION_GUARDS, InUse
from virtplane.services.hotplug import admit_hotplug
from virtplane.services.networks import NetworkAdmission
from virtplane.services.placement_admission import refuse_rule_breaking_move
from virtplane.store.store import Store

IMMUTABLE_SPEC = (VirtualMachineOperation, VirtualMachineSnapshot, VirtualMachineBackup, Image)


def _raise(refusal: DomainError | None) -> None:
    if refusal is not None:
        raise refusal


class Admission:
    def __init__(self, store: Store, cache: Cache) -> None:
        self.store = store
        self.cache = cache
        self.networks = NetworkAdmission(store, cache)
        self.find_backup = partial(store.find, VirtualMachineBackup)

    def claims_of(self, obj: Resource) -> list[Claim]:
        """What ``obj`` holds alone, written with it (a VM's MACs and addresses)."""
        return nic_claims(obj.spec.nics) if isinstance(obj, VirtualMachine) else []

    def on_create(self, obj: Resource) -> Resource:
        if isinstance(obj, VirtualMachineOperation):
            self._admit_operation(obj)
        elif isinstance(obj, VirtualMachineSnapshot) and self.store.find(VirtualMachine, obj.spec.vm) is None:
            raise Invalid("VMNotFound", f"VM {obj.spec.vm} does not exist")
        elif isinstance(obj, VirtualMachineBackup):
            self._admit_backup(obj)
        elif isinstance(obj, BackupPolicy) and self.store.find(BackupTarget, obj.spec.target) is None:
            raise Invalid(
                "TargetNotFound",
                f"spec.target: backup target {obj.spec.target} does not exist (kind BackupTarget, admin)",
            )
        elif isinstance(obj, Volume):
            self._admit_volume(obj)
        elif isinstance(obj, VirtualMachine):
            check_template_change(None, obj)
            self._admit_boot(obj)
            self._admit_disks(obj, set())
            self.networks.admit_nics(obj, None)
        elif isinstance(obj, Network):
            self.networks.admit_network(obj, None)
        elif isinstance(obj, Image):
            self._library(obj.spec.pool)
            if obj.spec.upload is not None:  # it lets the file be checked through libvirt alone
                raise Invalid(
                    "UploadOnly",
                    "spec.upload is set by the server for the files it writes itself "
                    "(PUT /v1/images/NAME/content); leave it out",
                )
        elif isinstance(obj, StoragePool):
            self._admit_pool(obj)
        elif isinstance(obj, Secret) and not obj.spec.password:
            raise Invalid("PasswordRequired", f"secret {obj.metadata.name} needs spec.password")
        elif isinstance(obj, Host):
            self._admit_fencing(obj)
        return obj

    def _admit_backup(self, backup: VirtualMachineBackup) -> None:
        if self.store.find(VirtualMachine, backup.spec.vm) is None:
            raise Invalid("VMNotFound", f"spec.vm: VM {backup.spec.vm} does not exist")
        target = self.store.find(BackupTarget, backup.spec.target)
        if target is None:
            raise Invalid(
                "TargetNotFound",
                f"spec.target: backup target {backup.spec.target} does not exist (kind BackupTarget, admin)",
            )
        if target.metadata.deletion_requested_at is not None:
            raise Refused("TargetDeleting", f"backup target {backup.spec.target} is being deleted")

    def _admit_fencing(self, host: Host) -> None:
        redfish = host.spec.fencing.redfish if host.spec.fencing else None
        if redfish is not None and self.store.find(Secret, redfish.credentials_secret) is None:
            raise Invalid(
                "SecretNotFound",
                f"spec.fencing.redfish.credentials_secret: secret {redfish.credentials_secret} does not "
                "exist; create it first (kind Secret, admin)",
            )

    # -- the image library (DESIGN.md §8: operators name images, never paths on a host)

    def _library(self, name: str) -> StoragePool:
        pool = self.store.find(StoragePool, name)
        if pool is None:
            raise Invalid("PoolNotFound", f"storage pool {name} does not exist")
        if pool.spec.content is not PoolContent.IMAGES:
            raise Invalid(
                "NotAnImageLibrary",
                f"storage pool {name} is not an image library (spec.content: images)",
            )
        return pool

    def _image(self, name: str, kind: ImageKind, field: str) -> None:
        image = self.store.find(Image, name)
        if image is None:
            raise Invalid("ImageNotFound", f"{field}: image {name} does not exist")
        if image.spec.kind is not kind:
            raise Invalid(
                "WrongImageKind",
                f"{field}: image {name} is a {image.spec.kind.value} image; this needs a {kind.value} image",
            )
        if image.status.phase is not ImagePhase.READY:
            raise Invalid("ImageNotReady", f"{field}: image {name} is {image.status.phase.value}, not Ready")

    def _admit_volume(self, volume: Volume) -> None:
        pool = self.store.find(StoragePool, volume.spec.pool)
        if pool is None:
            raise Invalid("PoolNotFound", f"storage pool {volume.spec.pool} does not exist")
        if pool.spec.content is PoolContent.IMAGES:
            raise Invalid(
                "PoolIsImageLibrary",
                f"storage pool {pool.metadata.name} is an image library, not for volumes",
            )
        source = volume.spec.source
        if source is None:
            return
        given = [field for field in ("image", "snapshot", "volume", "backup") if getattr(source, field)]
        if given not in (["image"], ["volume"], ["snapshot", "volume"], ["volume", "backup"], []):
            raise Invalid(
                "Invalid",
                "spec.source: give an image, a volume, or a snapshot or backup and the volume it saved, "
                f"not {given}",
            )
        if source.backup and source.volume:
            _raise(saved_disk_of_backup(source.backup, source.volume, self.find_backup))
        elif source.image:
            self._image(source.image, ImageKind.DISK, "spec.source.image")
        elif source.snapshot:
            snapshot = self.store.find(VirtualMachineSnapshot, source.snapshot)
            if snapshot is None:
                raise Invalid(
                    "SnapshotNotFound", f"spec.source.snapshot: snapshot {source.snapshot} does not exist"
                )
            if not any(d.volume == source.volume for d in snapshot.status.disk_snapshots):
                raise Invalid(
                    "SnapshotDiskMissing",
                    f"spec.source: snapshot {source.snapshot} saved no disk of volume {source.volume}",
                )
        elif source.volume and self.store.find(Volume, source.volume) is None:
            raise Invalid("VolumeNotFound", f"spec.source.volume: volume {source.volume} does not exist")
        if source.linked:
            self._admit_linked(volume)

    def _admit_untemplate(self, template: VirtualMachine) -> None:
        """A template whose disks back linked clones stays one: it would run and change them."""
        for disk in template.spec.disks:
            clones = self.cache.linked_clones_of(disk.volume)
            if clones:
                raise Refused(
                    "TemplateHasLinkedClones",
                    f"volume {disk.volume} of template {template.metadata.name} is the backing file of "
                    f"linked clones {', '.join(clones)}: it stays a template while they exist",
                )

    def _admit_linked(self, volume: Volume) -> None:
        source = volume.spec.source
        assert source is not None
        if source.snapshot and source.volume:  # the saved disk is beside the volume, in its pool
            saved = self.store.find(Volume, source.volume)
            pool_name = saved.spec.pool if saved is not None else ""
            pool = self.store.find(StoragePool, pool_name) if saved is not None else None
            refusal = saved_disk_refusal(source.snapshot, source.volume, pool, pool_name, volume.spec.pool)
            if refusal is not None:
                raise refusal
            return
        backing = self.store.find(Volume, source.volume) if source.volume else None
        if backing is None:
            raise Invalid(
                "LinkedNeedsVolume", "spec.source.linked: a linked clone is an overlay on a volume; name it"
            )
        users = [
            vm for vm in self.cache.vms() if any(d.volume == backing.metadata.name for d in vm.spec.disks)
        ]
        pool = self.store.find(StoragePool, backing.spec.pool)
        refusal = linked_refusal(backing, pool, volume.spec.pool, users)
        if refusal is not None:
            raise refusal

    def _admit_boot(self, vm: VirtualMachine) -> None:
        if vm.spec.cdrom is not None:
            self._image(vm.spec.cdrom, ImageKind.ISO, "spec.cdrom")
        if vm.spec.boot is not None:
            self._image(vm.spec.boot.kernel, ImageKind.KERNEL, "spec.boot.kernel")
            if vm.spec.boot.initrd:
                self._image(vm.spec.boot.initrd, ImageKind.INITRD, "spec.boot.initrd")

    def _admit_pool(self, pool: StoragePool) -> None:
        """A library never shares its directory with a volume pool: volume deletion never reaches it."""
        for other in self.store.list_objects(StoragePool):
            if other.spec.content is pool.spec.content or other.metadata.name == pool.metadata.name:
                continue
            if pools_overlap(pool, other):
                raise Invalid(
                    "PoolOverlap",
                    f"storage pool {pool.metadata.name} would share its directory with pool "
                    f"{other.metadata.name}: image libraries and volume pools must not overlap",
                )

    def _admit_disks(self, vm: VirtualMachine, already: set[str]) -> None:
        """A volume is a disk of one VM at a time: refuse one that another live VM holds or lists.

        Two writes may still race past this check; the Volume controller then attaches the
        volume to one of them and the other waits (controllers.attachments)."""
        for disk in vm.spec.disks:
            if disk.volume in already:
                continue
            volume = self.store.find(Volume, disk.volume)
            holder = volume.status.attached_vm if volume else None
            names = {*self.cache.vms_using_volume(disk.volume), *([holder] if holder else [])}
            users = users_of(disk.volume, (self.cache.vm(name) for name in names))
            owner = attached_elsewhere(vm.metadata.name, holder, users)
            if owner is not None:
                raise Refused(
                    "VolumeAttached",
                    f"volume {disk.volume} is attached to VM {owner}; a volume is a disk of one VM at a time",
                )
            clones = self.cache.linked_clones_of(disk.volume)
            if clones and not vm.spec.template:
                raise Refused(
                    "VolumeBacksLinkedClones",
                    f"volume {disk.volume} is the backing file of linked clones {', '.join(clones)}: only a "
                    "template (which never runs) may have it as a disk",
                )

    def _admit_operation(self, op: VirtualMachineOperation) -> None:
        vm = self.store.find(VirtualMachine, op.spec.vm)
        if vm is None:
            raise Invalid("VMNotFound", f"VM {op.spec.vm} does not exist")
        ops = self.cache.operations_of(vm.metadata.name)
        admission = admit(
            op.spec.type,
            op.spec.force,
            vm.spec.run_policy,
            vm.status.phase,
            active_before(ops, op),
            held=bool(read_intents(vm.metadata.annotations).held_by),
        )
        if not admission.allowed:
            raise Refused(admission.reason, admission.message)
        refuse_rule_breaking_move(self.cache, op, vm)
        _raise(spec_refusal(vm.metadata.name, op.spec.restore, self.find_backup))

    def on_update(self, current: Resource, new: Resource) -> Resource:
        if isinstance(current, IMMUTABLE_SPEC) and current.spec != new.spec:  # type: ignore[attr-defined]
            raise Invalid("Immutable", f"the spec of a {current.KIND} cannot change; create a new one")
        if (
            isinstance(current, BackupTarget)
            and isinstance(new, BackupTarget)
            and (current.spec.path, current.spec.driver_pool) != (new.spec.path, new.spec.driver_pool)
        ):
            raise Invalid("Immutable", "spec.path and spec.driver_pool of a backup target cannot change")
        if isinstance(current, StoragePool) and isinstance(new, StoragePool):
            if current.spec.content is not new.spec.content:
                raise Invalid("Immutable", "spec.content of a storage pool cannot change")
            if (pool_driver_name(current), pool_path(current)) != (pool_driver_name(new), pool_path(new)):
                self._admit_pool(new)
        elif isinstance(current, Volume) and isinstance(new, Volume):
            if (current.spec.pool, current.spec.source) != (new.spec.pool, new.spec.source):
                self._admit_volume(new)
        elif isinstance(current, VirtualMachine) and isinstance(new, VirtualMachine):
            check_template_change(current, new)
            if current.spec.template and not new.spec.template:
                self._admit_untemplate(current)
            if (current.spec.boot, current.spec.cdrom) != (new.spec.boot, new.spec.cdrom):
                self._admit_boot(new)
            self._admit_disks(new, {d.volume for d in current.spec.disks})
            admit_hotplug(self.cache, current, new)
            self.networks.admit_nics(new, current)
        elif isinstance(current, Network) and isinstance(new, Network):
            self.networks.admit_network(new, current)
        elif isinstance(current, Secret) and isinstance(new, Secret) and new.spec.password is None:
            new.spec.password = current.spec.password  # write-only: a write without it keeps it
        elif isinstance(current, Host) and isinstance(new, Host) and current.spec.fencing != new.spec.fencing:
            self._admit_fencing(new)
        return new

    def on_delete(self, current: Resource) -> None:
        """Refuse deleting what something else still uses (``deletion_guards``)."""
        guard = next((g for cls in type(current).__mro__ if (g := DELETION_GUARDS.get(cls))), None)
        if guard is not None:
            guard(InUse(self.store, self.cache, self.networks), current)
