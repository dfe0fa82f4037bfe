"""Issue 36 added ``status.verification`` to VirtualMachineBackup: a backup an older release
stored (without it) is rewritten in the current shape by the upgrade and reads as unverified."""

from __future__ import annotations

import json

from sqlalchemy import text

from tests.store.upgrades import forget_fingerprints, set_body
from virtplane.domain.resources import Metadata, VirtualMachineBackup, VirtualMachineBackupSpec
from virtplane.store.store import Store


def test_a_backup_stored_before_verification_existed_is_upgraded(store: Store) -> None:
    store.create(
        VirtualMachineBackup(
            metadata=Metadata(name="b1"), spec=VirtualMachineBackupSpec(vm="web", target="t")
        )
    )
    set_body(store, "VirtualMachineBackup", "b1", lambda body: body["status"].pop("verification"))
    forget_fingerprints(store)

    store.migrate()

    with store.engine.connect() as connection:
        body = json.loads(
            connection.execute(
                text("SELECT body FROM objects WHERE kind = 'VirtualMachineBackup' AND name = 'b1'")
            ).scalar_one()
        )
    assert body["status"]["verification"] is None, "the stored body is in the current shape"
    assert store.get(VirtualMachineBackup, "b1").status.verification is None
