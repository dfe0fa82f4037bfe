"""What the API shows of a stored object: everything but a Secret's password (write-only)."""

from __future__ import annotations

import json
from typing import Any

from virtplane.domain.resources import Resource, Secret

__all__ = ["public_doc", "public_json"]


def public_doc(obj: Resource) -> dict[str, Any]:
    doc = obj.model_dump(mode="json")
    if isinstance(obj, Secret):
        doc["spec"].pop("password", None)
        doc["status"] = {"password_set": bool(obj.spec.password)}
    return doc


def public_json(obj: Resource) -> str:
    """``public_doc`` as JSON; other kinds than Secret go the fast way."""
    return json.dumps(public_doc(obj)) if isinstance(obj, Secret) else obj.model_dump_json()
