"""Live migration: the coordinator (targets, slots, the durable intent), the follower (the
controller that reads each migration's outcome from the hypervisors) and the Migrate and
Evict operations. Host maintenance uses the same coordinator.
"""

from virtplane.controllers.migration.coordinator import KIND, MigrationCoordinator
from virtplane.controllers.migration.flights import (
    Refused,
    Started,
    Waiting,
    failure_message,
    in_flight,
    maintenance_tag,
    operation_tag,
)
from virtplane.controllers.migration.follower import WATCHES as FOLLOWER_WATCHES
from virtplane.controllers.migration.follower import MigrationFollower
from virtplane.controllers.migration.operations import WATCHES as OPERATION_WATCHES
from virtplane.controllers.migration.operations import MigrationOperations
from virtplane.controllers.registration import HandlerRegistration, Registration
from virtplane.domain.resources import OperationType

FOLLOWER = Registration(
    KIND,
    lambda parts: MigrationFollower(parts.ctx, parts.migrations),
    FOLLOWER_WATCHES,
    workers=4,
    looked_at_on_start=False,  # a VM with a migration intent wakes it (FOLLOWER_WATCHES)
)
HANDLER = HandlerRegistration(
    (OperationType.MIGRATE, OperationType.EVICT),
    lambda parts: MigrationOperations(parts.ctx, parts.migrations),
    OPERATION_WATCHES,  # Migrate and Evict wait for migration slots
)

__all__ = [
    "FOLLOWER",
    "FOLLOWER_WATCHES",
    "HANDLER",
    "KIND",
    "OPERATION_WATCHES",
    "MigrationCoordinator",
    "MigrationFollower",
    "MigrationOperations",
    "Refused",
    "Started",
    "Waiting",
    "failure_message",
    "in_flight",
    "maintenance_tag",
    "operation_tag",
]
