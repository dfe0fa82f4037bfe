"""A VM's conditions say where it is after every move (issue 39): two live migrations, then a
drain of its host. Each check reads the VM as the API serves it (``describe`` prints these)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import eventually
from tests.controllers.helpers import wait_op
from tests.maintenance.conftest import Cluster
from tests.maintenance.test_cancel_and_operations import migrate_op
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.resources import ConditionStatus, OperationPhase, OperationType

SRC = Path(__file__).resolve().parents[2] / "src" / "virtplane"


def scheduled_on(cluster: Cluster, vm: str) -> str:
    """The host the VM's Scheduled condition names, checked True and agreeing with status.host."""
    current = cluster.vm(vm)
    condition = get_condition(current.status.conditions, VMCondition.SCHEDULED)
    assert condition is not None and condition.status is ConditionStatus.TRUE, current.status.conditions
    named = re.findall(r"\bh\d\b", condition.message)
    assert named == [current.status.host], f"{condition.message!r} on {current.status.host}"
    return current.status.host or ""


async def test_scheduled_names_the_host_after_two_migrations_and_a_drain(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("db-1")
    await cluster.add_host("h2")
    await cluster.add_host("h3")
    assert scheduled_on(cluster, "db-1") == "h1"

    for attempt, target in enumerate(("h2", "h3"), start=1):
        op = migrate_op(cluster, "db-1", OperationType.MIGRATE, target, attempt=attempt)
        done = await wait_op(cluster.plane, op)
        assert done.status.phase is OperationPhase.COMPLETED, done.status.message
        await eventually(lambda target=target: cluster.settled("db-1", target))
        assert scheduled_on(cluster, "db-1") == target
        moved = get_condition(cluster.vm("db-1").status.conditions, VMCondition.SCHEDULED)
        assert moved is not None and moved.reason == "Migrated"

    cluster.request("h3")  # the drain live-migrates it to h1 or h2
    await cluster.wait_state("h3", "Maintenance")
    drained_to = cluster.vm("db-1").status.host
    assert drained_to in ("h1", "h2")
    await eventually(lambda: cluster.settled("db-1", drained_to or ""))
    assert scheduled_on(cluster, "db-1") == drained_to


def _writes_of_status_host(path: Path) -> list[str]:
    """Assignments to ``X.status.host`` and ``status.host`` in one module (a snapshot's and a backup's excepted)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if not (isinstance(target, ast.Attribute) and target.attr == "host"):
                continue
            owner = ast.unparse(target.value)
            if owner.split(".")[-1] == "status" and not owner.startswith(("snap", "backup")):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_placement_helpers_write_a_vms_host() -> None:
    """status.host and the Scheduled condition change together: one pair of functions writes both."""
    writes = [write for path in sorted(SRC.rglob("*.py")) for write in _writes_of_status_host(path)]
    assert writes and all(w.startswith("domain/conditions.py:") for w in writes), writes
