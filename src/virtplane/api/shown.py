"""What the API shows of a stored object: everything but a Secret's password (write-only)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from virtplane.domain.resources import Resource, Secret

__all__ = ["public_bodies", "public_doc", "public_json"]


def public_doc(obj: Resource) -> dict[str, Any]:
    doc = obj.model_dump(mode="json")
    if isinstance(obj, Secret):
        doc["spec"].pop("password", None)
        doc["status"] = {"password_set": bool(obj.spec.password)}
    return doc


def public_json(obj: Resource) -> str:
    """``public_doc`` as JSON; other kinds than Secret go the fast way."""
    return json.dumps(public_doc(obj)) if isinstance(obj, Secret) else obj.model_dump_json()


def public_bodies(cls: type[Resource], bodies: Sequence[str]) -> list[str]:
    """Stored bodies of ``cls`` as the API shows them: as they are, but a Secret's parsed and redacted."""
    if issubclass(cls, Secret):
        return [public_json(cls.model_validate_json(body)) for body in bodies]
    return list(bodies)
