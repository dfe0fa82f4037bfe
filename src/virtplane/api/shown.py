"""What the API shows of a stored object: everything but a Secret's password (write-only),
and, to viewers, not a VM's ``cloud_init.user_data`` (nor a snapshot's copy of it), which
often holds passwords and keys: operators and admins, who may write it, read it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from virtplane.domain.resources import Resource, Secret, VirtualMachine, VirtualMachineSnapshot

__all__ = ["REDACTED_USER_DATA", "public_bodies", "public_doc", "public_json"]

REDACTED_USER_DATA = "(redacted: only operators and admins read user_data)"
_WITH_USER_DATA = (VirtualMachine, VirtualMachineSnapshot)


def _redact_user_data(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a VM's or a snapshot's JSON) with a non-empty user_data replaced, in place."""
    captured = (doc.get("status") or {}).get("captured") or {}
    for spec in (doc.get("spec") or {}, captured.get("spec") or {}):
        cloud_init = spec.get("cloud_init")
        if isinstance(cloud_init, dict) and cloud_init.get("user_data"):
            cloud_init["user_data"] = REDACTED_USER_DATA
    return doc


def public_doc(obj: Resource, *, redacted: bool = False) -> dict[str, Any]:
    """``redacted``: as a viewer sees it."""
    doc = obj.model_dump(mode="json")
    if isinstance(obj, Secret):
        doc["spec"].pop("password", None)
        doc["status"] = {"password_set": bool(obj.spec.password)}
    if redacted and isinstance(obj, _WITH_USER_DATA):
        _redact_user_data(doc)
    return doc


def public_json(obj: Resource, *, redacted: bool = False) -> str:
    """``public_doc`` as JSON; what needs nothing hidden goes the fast way."""
    if isinstance(obj, Secret) or (redacted and isinstance(obj, _WITH_USER_DATA)):
        return json.dumps(public_doc(obj, redacted=redacted))
    return obj.model_dump_json()


def public_bodies(cls: type[Resource], bodies: Sequence[str], *, redacted: bool = False) -> list[str]:
    """Stored bodies of ``cls`` as the API shows them: as they are, but a Secret's parsed and
    redacted, and for a viewer each VM or snapshot that has user data."""
    if issubclass(cls, Secret):
        return [public_json(cls.model_validate_json(body)) for body in bodies]
    if redacted and issubclass(cls, _WITH_USER_DATA):
        # most bodies have none: only those are parsed ('"user_data":""' is how an empty one is stored)
        return [
            json.dumps(_redact_user_data(json.loads(body))) if _has_user_data(body) else body
            for body in bodies
        ]
    return list(bodies)


def _has_user_data(body: str) -> bool:
    return body.count('"user_data":') > body.count('"user_data":""')
