"""The controllers the control plane runs, in the order it looks at everything once on start
(dependency order: a VM's host, pools, images and networks are known before the VM is looked
at), and the operation handlers the operation controller hands types to. ``bootstrap`` is a
loop over these; a new controller is one ``Registration`` beside it and one line here."""

from __future__ import annotations

from virtplane.controllers import (
    backup_policies,
    backup_targets,
    backup_verify,
    backups,
    host,
    images,
    maintenance,
    migration,
    networks,
    operations,
    restore,
    snapshots,
    storage,
    vm,
)
from virtplane.controllers.registration import HandlerRegistration, Registration

__all__ = ["CONTROLLERS", "OPERATION_HANDLERS"]

CONTROLLERS: tuple[Registration, ...] = (
    host.CONTROLLER,
    storage.POOL_CONTROLLER,
    images.CONTROLLER,
    networks.CONTROLLER,
    storage.VOLUME_CONTROLLER,
    vm.CONTROLLER,
    snapshots.CONTROLLER,
    backup_targets.CONTROLLER,
    backups.CONTROLLER,
    backup_policies.CONTROLLER,
    backup_verify.CONTROLLER,
    operations.CONTROLLER,
    migration.FOLLOWER,
    maintenance.CONTROLLER,
)

OPERATION_HANDLERS: tuple[HandlerRegistration, ...] = (restore.HANDLER, migration.HANDLER)
