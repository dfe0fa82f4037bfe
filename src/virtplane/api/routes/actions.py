"""Power operations on every VM a selector matches: ``POST /v1/vms/actions/{start,stop,restart}``.

One request creates one VirtualMachineOperation per matching VM, each admitted as if it
had been sent alone (the same refusals, with their reasons), and answers per VM: the
operation created, or why none was. The operations carry the label
``virtplane.io/batch=<id>`` so that a client can watch them all with one selector.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from fastapi import APIRouter, Body, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from virtplane.api.auth import Principal, Role, require
from virtplane.api.context import Admission, ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.lists import field_selector, label_selector
from virtplane.api.routes.resources import admit
from virtplane.domain.errors import DomainError, Refused
from virtplane.domain.names import BATCH_LABEL, generated_name, random_suffix
from virtplane.domain.resources import (
    EventType,
    Metadata,
    OperationType,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
)
from virtplane.domain.selectors import MAX_SELECTOR_LENGTH, selectable_fields
from virtplane.store.database import EventRecord
from virtplane.store.errors import AlreadyExists
from virtplane.store.lists import matching_names

router = APIRouter(tags=["VirtualMachine"])

ADMIT_CHUNK = 100
"""Operations admitted per trip to the event loop (admission reads the store there)."""


class Selection(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    label_selector: str = Field(
        default="", alias="labelSelector", max_length=MAX_SELECTOR_LENGTH, description="e.g. app=web,tier!=db"
    )
    field_selector: str = Field(
        default="",
        alias="fieldSelector",
        max_length=MAX_SELECTOR_LENGTH,
        description="e.g. status.host=host-1,status.phase=Running",
    )
    force: bool = Field(default=False, description="Power off / reset at once instead of asking the guest.")


class Outcome(BaseModel):
    vm: str
    operation: str | None = Field(description="The operation created; null when the VM was refused.")
    reason: str = Field(
        description="Created, or the refusal's reason (NotApplicable, OperationInProgress...)."
    )
    message: str


class ActionMetadata(BaseModel):
    batch: str = Field(description=f"The value of the label {BATCH_LABEL} on every operation created.")
    selected: int
    created: int
    refused: int


class ActionResult(BaseModel):
    items: list[Outcome]
    metadata: ActionMetadata


def _admit_each(
    admission: Admission, operations: Sequence[VirtualMachineOperation]
) -> list[DomainError | None]:
    """Admission's refusal of each operation (a domain error), or None: admitted."""
    refusals: list[DomainError | None] = []
    for operation in operations:
        try:
            admission.on_create(operation)
            refusals.append(None)
        except DomainError as refusal:
            refusals.append(refusal)
    return refusals


def _act(ctx: ApiContext, selection: Selection, principal: Principal, kind: OperationType) -> ActionResult:
    labels = label_selector(selection.label_selector)
    fields = field_selector(selection.field_selector, selectable_fields(VirtualMachine))
    if not labels and not fields:
        raise ApiError(
            422,
            "SelectorRequired",
            "name the VMs with labelSelector or fieldSelector (e.g. app=web): "
            "an empty selection would be every VM",
        )
    batch = uuid.uuid4().hex[:12]
    operations = [
        VirtualMachineOperation(
            metadata=Metadata(
                name=generated_name(vm, kind.lower(), random_suffix()), labels={BATCH_LABEL: batch}
            ),
            spec=VirtualMachineOperationSpec(vm=vm, type=kind, force=selection.force),
        )
        for vm in matching_names(ctx.store, VirtualMachine.KIND, labels=labels, fields=fields)
    ]
    outcomes: list[Outcome] = []

    def created_event(operation: VirtualMachineOperation) -> list[EventRecord]:
        message = f"created by {principal.name} (batch {batch})"
        return [(operation.KIND, operation.metadata.name, "Created", message, EventType.NORMAL)]

    for start in range(0, len(operations), ADMIT_CHUNK):
        chunk = operations[start : start + ADMIT_CHUNK]
        refusals = admit(ctx, _admit_each, ctx.admission, chunk)
        admitted = [operation for operation, refusal in zip(chunk, refusals, strict=True) if refusal is None]
        # One transaction for the chunk's operations and their events; a generated name taken
        # meanwhile is that VM's refusal, never an overwrite.
        written = iter(ctx.store.create_many(admitted, events=created_event))
        for operation, refusal in zip(chunk, refusals, strict=True):
            vm, name = operation.spec.vm, operation.metadata.name
            if refusal is None:
                result = next(written)
                if isinstance(result, AlreadyExists):
                    refusal = Refused("AlreadyExists", str(result))
            if refusal is not None:
                outcomes.append(
                    Outcome(vm=vm, operation=None, reason=refusal.reason, message=refusal.message)
                )
                continue
            outcomes.append(
                Outcome(vm=vm, operation=name, reason="Created", message=f"{kind.value} of VM {vm}")
            )
    created = sum(1 for o in outcomes if o.operation is not None)
    metadata = ActionMetadata(
        batch=batch, selected=len(outcomes), created=created, refused=len(outcomes) - created
    )
    return ActionResult(items=outcomes, metadata=metadata)


def _register(kind: OperationType) -> None:
    def action(
        request: Request,
        body: Selection = Body(...),
        principal: Principal = Depends(require(Role.OPERATOR)),
    ) -> ActionResult:
        ctx: ApiContext = request.app.state.ctx
        return _act(ctx, body, principal, kind)

    verb = kind.value.lower()
    router.add_api_route(
        f"/v1/vms/actions/{verb}",
        action,
        methods=["POST"],
        operation_id=f"{verb}_vms",
        summary=f"{kind.value} every VM a selector matches (one operation each, outcomes per VM)",
        responses={422: {"description": "A malformed or missing selector."}},
    )


for _kind in (OperationType.START, OperationType.STOP, OperationType.RESTART):
    _register(_kind)

__all__ = ["BATCH_LABEL", "router"]
