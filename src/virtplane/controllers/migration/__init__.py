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

__all__ = [
    "FOLLOWER_WATCHES",
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
