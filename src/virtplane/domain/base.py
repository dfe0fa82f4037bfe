"""What every resource has: metadata, conditions, the checked name types, the strict base.

Split from ``resources`` so that kinds defined in their own modules (``networks``)
share it without an import cycle.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from virtplane.domain.api_version import API_VERSION as API_VERSION  # re-exported: the kinds import it here

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_SETTING_KEY = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,126}[a-z0-9])?$")


def _check_dns_label(value: str) -> str:
    if not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: use 1-63 lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


def _check_labels(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 64:
        raise ValueError("at most 64 entries are allowed")
    for key, item in value.items():
        if not _LABEL_KEY.match(key):
            raise ValueError(f"{key!r} is not a valid key (prefix/name, letters, digits, '-', '_', '.')")
        if len(item) > 4096:
            raise ValueError(f"the value of {key!r} is longer than 4096 characters")
    return value


Name = Annotated[str, AfterValidator(_check_dns_label)]
"""A DNS-1123 label: the name of every resource (settings aside) and every reference."""

StringMap = Annotated[dict[str, str], AfterValidator(_check_labels)]


class Strict(BaseModel):
    """Base of every user-writable block: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Metadata(Strict):
    name: str = Field(description="Unique within the kind; a DNS-1123 label (settings: a dotted key).")
    uid: str = ""
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)
    generation: int = 0
    resource_version: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    deletion_requested_at: datetime | None = None
    finalizers: list[str] = Field(default_factory=list)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str
    status: ConditionStatus
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int = 0


class Resource(BaseModel):
    """Base of every kind. Subclasses narrow ``kind``, ``spec`` and ``status``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    KIND: ClassVar[str] = ""
    PLURAL: ClassVar[str] = ""
    NAME_IS_DNS_LABEL: ClassVar[bool] = True
    FINALIZERS_ON_CREATE: ClassVar[tuple[str, ...]] = ()
    """Finalizers the API sets when it creates an object of the kind: a controller's cleanup
    that deletion must wait for, known before its first look (Kubernetes' PVC protection
    admission), so that look does not write it first."""

    api_version: Literal["virtplane.io/v1"] = Field(default="virtplane.io/v1", alias="apiVersion")
    kind: str = ""
    metadata: Metadata

    @model_validator(mode="after")
    def _check_kind_and_name(self) -> Resource:
        if not self.kind:
            self.kind = self.KIND
        elif self.kind != self.KIND:
            raise ValueError(f"kind is {self.kind!r}, expected {self.KIND!r}")
        if self.NAME_IS_DNS_LABEL:
            _check_dns_label(self.metadata.name)
        elif not _SETTING_KEY.match(self.metadata.name):
            raise ValueError(f"{self.metadata.name!r} is not a valid key")
        return self

    @property
    def name(self) -> str:
        return self.metadata.name


M = TypeVar("M", bound=BaseModel)


def copied(model: M) -> M:
    """A deep copy through a dump and a validation: two to six times faster than
    ``model_copy(deep=True)`` (Python's deepcopy walks every field; 20 -> 9 us for a Volume),
    and the copy is checked as any input is."""
    return type(model).model_validate(model.model_dump())
