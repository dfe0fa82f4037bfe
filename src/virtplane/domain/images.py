"""Rules for the image library and for the files virtplane owns on a hypervisor host.

DESIGN.md §8: an operator never names a path on a hypervisor host. Images (disk
images, boot kernels and initrds) are files in storage pools an admin marks as
image libraries, named by an ``Image`` resource; volumes are files virtplane
creates itself, named after the Volume's uid, so it never adopts or deletes a file
it did not make. Pure: no I/O.
"""

from __future__ import annotations

import posixpath

from virtplane.domain.names import IMAGE_FILE

OWNED_VOLUME_PREFIX = "vp-"
"""Every volume file virtplane creates starts with this, followed by the Volume's uid."""


def check_image_file(value: str) -> str:
    """A file name inside a library pool: one plain name, never a path."""
    if value.startswith("/"):
        raise ValueError("must be a file name inside the image library, not an absolute path")
    if "/" in value or "\\" in value:
        raise ValueError("must be a file name directly inside the image library, not a path")
    if value in (".", "..") or ".." in value:
        raise ValueError("must not contain '..'")
    if not IMAGE_FILE.matches(value):
        raise ValueError(
            "must be 1-255 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
        )
    return value


UPLOADED_IMAGE_PREFIX = "vp-image-"
"""Library files virtplane writes itself (uploads and imports): ``vp-image-<Image name>.<format>``."""

_ISO_MAGIC_AT = 0x8001
PROBE_BYTES = _ISO_MAGIC_AT + 5
"""How much of a file's start ``probe_format`` reads."""


def uploaded_image_file(image_name: str, fmt: str) -> str:
    """The library file of an uploaded Image: named after it, in virtplane's own namespace, so an
    admin's file is never overwritten and a retried upload replaces its own earlier copy."""
    return f"{UPLOADED_IMAGE_PREFIX}{image_name}.{fmt}"


def probe_format(head: bytes) -> str:
    """The format of a file that starts with ``head`` (``PROBE_BYTES`` of it), as libvirt's
    probe names it: qcow2, vmdk, iso, else raw."""
    if head.startswith(b"QFI\xfb"):
        return "qcow2"
    if head.startswith(b"KDMV"):
        return "vmdk"
    if head[_ISO_MAGIC_AT : _ISO_MAGIC_AT + 5] == b"CD001":
        return "iso"
    return "raw"


def owned_volume_file(volume_uid: str) -> str:
    """The file name of a Volume's disk: derived from its uid, so it is only ever virtplane's own."""
    return f"{OWNED_VOLUME_PREFIX}{volume_uid}"


def paths_overlap(a: str, b: str) -> bool:
    """Whether two pool directories are the same, or one lies inside the other."""
    first, second = posixpath.normpath(a), posixpath.normpath(b)
    return (
        first == second
        or first.startswith(second.rstrip("/") + "/")
        or second.startswith(first.rstrip("/") + "/")
    )


__all__ = [
    "OWNED_VOLUME_PREFIX",
    "PROBE_BYTES",
    "UPLOADED_IMAGE_PREFIX",
    "check_image_file",
    "owned_volume_file",
    "paths_overlap",
    "probe_format",
    "uploaded_image_file",
]
