"""``POST /v1/backups/{name}/verify`` (issue 36): ask for a verification of a backup's files on
its target. The answer comes back at once with the request's id (the system annotation
``virtplane.io/verify-requested``); the backup's ``status.verification`` answers that request
once the check ran (``controllers.backup_verify``): poll or watch the backup.

Operators may ask: backups are their kind (they take and delete them), and a verification only
reads the backup's files and writes its result; a viewer may not, as it costs the target a
read of whole disks.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.domain.resources import VERIFY_REQUESTED, BackupPhase, EventType, VirtualMachineBackup
from virtplane.store.errors import NotFound

router = APIRouter(tags=["VirtualMachineBackup"])


@router.post(
    "/v1/backups/{name}/verify",
    operation_id="verify_backup",
    status_code=202,
    summary="Verify a backup's files on its target (qemu-img check and compare of each disk's chain)",
)
def verify_backup(
    name: str, request: Request, principal: Principal = Depends(require(Role.OPERATOR))
) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    asked = f"{principal.name}@{uuid.uuid4().hex[:12]}"

    def ask(backup: VirtualMachineBackup) -> None:
        if backup.metadata.deletion_requested_at is not None:
            raise ApiError(409, "BackupDeleting", f"backup {name} is being deleted")
        if backup.status.phase is not BackupPhase.SUCCEEDED:
            raise ApiError(
                409,
                "BackupNotSucceeded",
                f"backup {name} is {backup.status.phase.value}: only a succeeded backup can be verified",
            )
        backup.metadata.annotations[VERIFY_REQUESTED] = asked

    event = ("VirtualMachineBackup", name, "VerifyRequested", f"by {principal.name}", EventType.NORMAL)
    try:
        written = ctx.store.mutate(VirtualMachineBackup, name, ask, status_only=True, events=[event])
    except NotFound:
        raise ApiError(404, "NotFound", f"backup {name} does not exist") from None
    return {"backup": name, "requested": asked, "status": written.status.model_dump(mode="json")}
