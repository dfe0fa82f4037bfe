"""2: host paths where an early release took them become Image references.

Before the image library (51f3164) a Volume's ``spec.source.image`` and a VM's
``spec.boot.kernel`` / ``spec.boot.initrd`` were paths on the hypervisor hosts; now they
name Images, and a stored path made the whole store unreadable. A VM snapshot keeps the
VM's spec (``status.captured.spec``), so its boot paths are the same case.

- A path that is a file directly inside an image library (a StoragePool with content
  ``images``), named by an Image of the kind the field takes: the field names that Image.
- Any other path: the field names the Image ``legacy_image_name(path)``, which does not
  exist, so that the object stays readable and deletable and nothing copies or boots
  another file in its place (an empty volume, a disk boot); the path is kept in the
  annotation ``virtplane.io/host-path.<field>`` and a condition (a VM's, a snapshot's) or
  the status message (a volume's) names the field and what to do: create that Image in a
  library, or change the field. No Image is created here: an Image says that an admin
  placed a file in a library and vouches for its kind and format, which a path alone
  does not tell (and the file may be on no host at all).

A Ready volume no longer reads its source: the reference only records where it came from.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

from virtplane.domain.base import Name
from virtplane.domain.images import check_image_file
from virtplane.domain.pools import DEFAULT_POOL_ROOT
from virtplane.store.migrations.data.base import Body, DataMigration, Known

VERSION = 2

CONDITION = "HostPathMigrated"
ANNOTATION_PREFIX = "virtplane.io/host-path."

_NAME: TypeAdapter[str] = TypeAdapter(Name)
_NOT_IN_NAME = re.compile(r"[^a-z0-9]+")


def is_name(value: str) -> bool:
    try:
        _NAME.validate_python(value)
    except ValidationError:
        return False
    return True


def legacy_image_name(path: str) -> str:
    """The Image a path that no library holds is referred to as: its file's name, made a DNS
    label, and a hash of the whole path (two paths never share one)."""
    stem = _NOT_IN_NAME.sub("-", posixpath.basename(path).lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    return f"legacy-{stem}-{digest}" if stem else f"legacy-{digest}"


def _library_image(path: str, image_kind: str, known: Known) -> tuple[str, str] | None:
    """The (Image, library) whose file ``path`` is, if an Image of ``image_kind`` names it."""
    if not posixpath.isabs(path):
        return None
    directory, file = posixpath.split(posixpath.normpath(path))
    try:
        check_image_file(file)
    except ValueError:
        return None
    libraries = set()
    for pool in known.get("StoragePool", ()):
        spec = pool.get("spec") or {}
        if spec.get("content") != "images":
            continue
        name = pool["metadata"]["name"]
        root = spec.get("path") or f"{DEFAULT_POOL_ROOT}/{spec.get('driver_pool') or name}"
        if posixpath.normpath(root) == directory:
            libraries.add(name)
    for image in known.get("Image", ()):
        spec = image.get("spec") or {}
        if spec.get("pool") in libraries and spec.get("file") == file and spec.get("kind") == image_kind:
            return image["metadata"]["name"], spec["pool"]
    return None


def _migrate_field(
    body: Body, holder: dict[str, Any], key: str, field: str, image_kind: str, known: Known
) -> str | None:
    """Make ``holder[key]`` (at ``field`` in the body) an Image name; what changed, if anything."""
    path = holder.get(key)
    if not isinstance(path, str) or is_name(path):
        return None
    found = _library_image(path, image_kind, known)
    if found is not None:
        holder[key] = found[0]
        return f"{field}: host path {path} is Image {found[0]} of library {found[1]}: now refers to it"
    name = legacy_image_name(path)
    holder[key] = name
    annotations = body.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[ANNOTATION_PREFIX + field] = path
    return (
        f"{field} was the host path {path}, which no image library holds; it now names Image {name}, "
        f"which does not exist: place the file in an image library and create Image {name} "
        f"(kind {image_kind}) for it, or set {field} to an existing Image"
    )


def _boot(body: Body, spec: Any, prefix: str, known: Known) -> list[str]:
    boot = spec.get("boot") if isinstance(spec, dict) else None
    if not isinstance(boot, dict):
        return []
    changes = [
        _migrate_field(body, boot, "kernel", f"{prefix}.boot.kernel", "Kernel", known),
        _migrate_field(body, boot, "initrd", f"{prefix}.boot.initrd", "Initrd", known),
    ]
    return [change for change in changes if change]


def _conditions(body: Body, changes: list[str]) -> None:
    """A condition naming the fields that still want an admin (the ones that name no Image yet)."""
    unresolved = [change for change in changes if "does not exist" in change]
    if not unresolved:
        return
    status = body.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION]
    conditions.append(
        {
            "type": CONDITION,
            "status": "True",
            "reason": "NotInImageLibrary",
            "message": "; ".join(unresolved),
            "last_transition_time": None,
            "observed_generation": body.get("metadata", {}).get("generation", 0),
        }
    )
    status["conditions"] = conditions


def upgrade(kind: str, body: Body, known: Known) -> list[str]:
    changes: list[str] = []
    if kind == "Volume":
        source = (body.get("spec") or {}).get("source")
        if isinstance(source, dict):
            change = _migrate_field(body, source, "image", "spec.source.image", "Disk", known)
            if change:
                changes.append(change)
                if "does not exist" in change:
                    body.setdefault("status", {})["message"] = change
    elif kind == "VirtualMachine":
        changes = _boot(body, body.get("spec"), "spec", known)
        _conditions(body, changes)
    elif kind == "VirtualMachineSnapshot":
        captured = (body.get("status") or {}).get("captured")
        if isinstance(captured, dict):
            changes = _boot(body, captured.get("spec"), "status.captured.spec", known)
            _conditions(body, changes)
    return changes


MIGRATION = DataMigration(VERSION, ("Volume", "VirtualMachine", "VirtualMachineSnapshot"), upgrade)
