"""An image: a file in an image library (a disk image, a kernel or an initrd), named."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import AfterValidator, BaseModel, Field, model_validator

from virtplane.domain.base import Name, Resource, Strict
from virtplane.domain.images import check_image_file
from virtplane.domain.names import SHA256


class ImageKind(StrEnum):
    DISK = "Disk"
    KERNEL = "Kernel"
    INITRD = "Initrd"
    ISO = "Iso"  # an installer CD: attached read-only as a VM's CD-ROM (spec.cdrom)


class ImageFormat(StrEnum):
    QCOW2 = "qcow2"
    RAW = "raw"
    ISO = "iso"  # an ISO 9660 file, as libvirt's probe names it


SHA256_HEX = SHA256.anchored

IMAGE_FILES_FINALIZER = "virtplane.io/image-files"
"""An uploaded Image's files are deleted from its library's hosts before the Image is."""


class ImageUpload(Strict):
    """Set by the server when it wrote the file itself (``PUT /v1/images/NAME/content``), never
    by hand: the hosts' copies are checked by their size, through libvirt alone, so a library
    a remote host keeps need not be mounted on the control plane."""

    sha256: str = Field(pattern=SHA256_HEX, description="The SHA-256 of the content, checked on receipt.")
    size_bytes: int = Field(ge=1, description="The file's size in bytes.")


class ImageSpec(Strict):
    pool: Name = Field(description="A StoragePool with content: images (an image library).")
    file: Annotated[str, AfterValidator(check_image_file)] = Field(
        description="The file's name inside the library pool: a plain name, never a path."
    )
    kind: ImageKind
    format: ImageFormat | None = Field(
        default=None,
        description="Disk images: qcow2 (the default) or raw. Kernels and initrds are raw; Iso images iso.",
    )
    upload: ImageUpload | None = Field(
        default=None, description="Set by an upload or import through the API (the file is virtplane's)."
    )

    @model_validator(mode="after")
    def _check_format(self) -> ImageSpec:
        if self.kind is ImageKind.ISO:
            if self.format not in (None, ImageFormat.ISO):
                raise ValueError("Iso images are iso files: leave spec.format out or set iso")
        elif self.format is ImageFormat.ISO:
            raise ValueError("format iso is for images of kind Iso")
        elif self.kind is not ImageKind.DISK and self.format is ImageFormat.QCOW2:
            raise ValueError("kernels and initrds are raw files: leave spec.format out or set raw")
        return self

    @property
    def effective_format(self) -> ImageFormat:
        if self.format is not None:
            return self.format
        return {ImageKind.DISK: ImageFormat.QCOW2, ImageKind.ISO: ImageFormat.ISO}.get(
            self.kind, ImageFormat.RAW
        )


class ImagePhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class ImageStatus(BaseModel):
    phase: ImagePhase = ImagePhase.PENDING
    size_bytes: int = 0
    virtual_size_gib: int = Field(default=0, description="Disk images: the smallest volume they fit.")
    hosts: list[str] = Field(default_factory=list, description="Hosts where the file was checked and found.")
    message: str = ""
    observed_generation: int = 0


class Image(Resource):
    KIND: ClassVar[str] = "Image"
    PLURAL: ClassVar[str] = "images"
    spec: ImageSpec
    status: ImageStatus = Field(default_factory=ImageStatus)
