"""A restore's source became a snapshot or a backup (issue 36: ``spec.restore.backup`` and
``spec.restore.disks`` beside ``spec.restore.snapshot``). The change only adds optional fields,
so a Restore operation stored by an earlier release reads as it was and needs no data
migration: here one in the shape the last fixture's release stored (its Stop operation's row,
made a Restore of db-1 from its snapshot ``db-1-disk`` just accepted, as its model dumped one:
``{"snapshot", "mode"}`` and nothing else) is resumed by the current server and completes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import wait_json
from tests.upgrade.conftest import FINISHED, settled, upgraded

RELEASE = "fa36f81"


def pending_restore_in_the_old_shape(data: Path) -> None:
    with sqlite3.connect(data / "virtplane.db") as db:
        (body,) = db.execute(
            "SELECT body FROM objects WHERE kind = 'VirtualMachineOperation' AND name LIKE 'app-1-stop-%'"
        ).fetchone()
        old = json.loads(body)
        assert set(old["spec"]) == {"vm", "type", "force", "restore", "migrate"}, "the old release's shape"
        old["metadata"].update(name="restore-db-1", uid="0a0b0c0d-0000-4000-8000-000000000001")
        old["spec"].update(vm="db-1", type="Restore", restore={"snapshot": "db-1-disk", "mode": "Strict"})
        old["status"] = {"phase": "Pending", "step": "", "conditions": [], "progress": {}, "message": "",
                         "reason": "", "started_at": None, "finished_at": None}  # fmt: skip
        (version,) = db.execute("SELECT max(resource_version) FROM objects").fetchone()
        old["metadata"]["resource_version"] = version + 1
        db.execute(
            "INSERT INTO objects (kind, name, uid, resource_version, generation, body) VALUES (?, ?, ?, ?, 1, ?)",
            ("VirtualMachineOperation", "restore-db-1", old["metadata"]["uid"], version + 1, json.dumps(old)),
        )


def test_a_restore_stored_by_the_old_release_is_resumed_and_completes(tmp_path: Path) -> None:
    with (
        upgraded(RELEASE, tmp_path, before=pending_restore_in_the_old_shape) as (server, _),
        server.client("operator") as operator,
    ):
        done = wait_json(
            operator, "/v1/operations/restore-db-1", lambda o: o["status"]["phase"] in FINISHED, 30
        )
        assert done["status"]["phase"] == "Completed", done["status"]
        assert done["spec"]["restore"] == {
            "snapshot": "db-1-disk",
            "backup": None,
            "disks": [],
            "mode": "Strict",
        }
        assert done["status"]["message"].startswith("VM restored from snapshot db-1-disk"), done["status"]
        settled(operator, "db-1")  # Running before, Running after
