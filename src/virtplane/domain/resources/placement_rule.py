"""A placement rule: which VMs run together or apart, and on which hosts (admin writes, all read).

VM-VM rules (``Affinity``, ``AntiAffinity``) apply to the VMs their ``vm_selector`` selects,
``required`` (a host that breaks it is excluded) or ``preferred`` (broken only when no host
that can take the VM keeps it). VM-host rules (``Host``) select VMs and hosts by label:
``must`` and ``mustNot`` are required, ``should`` preferred. The VM spec's
``placement.anti_affinity_group`` and ``placement.host_affinity`` stay, read as built-in
required rules (``domain.placement``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, Field, field_validator, model_validator

from virtplane.domain.base import Resource, Strict
from virtplane.domain.selectors import MAX_SELECTOR_LENGTH, parse_label_selector


class RuleType(StrEnum):
    AFFINITY = "Affinity"
    """The VMs it selects run on one host."""
    ANTI_AFFINITY = "AntiAffinity"
    """The VMs it selects run on different hosts."""
    HOST = "Host"
    """The VMs it selects run on (must, should) or off (mustNot) the hosts it selects."""


class Enforcement(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


class HostMode(StrEnum):
    MUST = "must"
    SHOULD = "should"
    MUST_NOT = "mustNot"


def _check_selector(text: str) -> str:
    parse_label_selector(text)  # a SelectorError is a ValueError: pydantic's 422 with the position
    return text


class PlacementRuleSpec(Strict):
    type: RuleType
    vm_selector: str = Field(
        min_length=1,
        max_length=MAX_SELECTOR_LENGTH,
        description="The VMs it applies to, by label (app=web,tier!=db); never empty.",
    )
    enforcement: Enforcement | None = Field(
        default=None,
        description="Affinity and AntiAffinity: required (the default) excludes a host that breaks "
        "it; preferred is broken only when no host keeps it. Host rules: none, their mode says it.",
    )
    host_selector: str = Field(
        default="", max_length=MAX_SELECTOR_LENGTH, description="Host rules: the hosts, by label."
    )
    mode: HostMode | None = Field(
        default=None, description="Host rules: must and mustNot are required, should preferred."
    )

    _selectors = field_validator("vm_selector", "host_selector")(_check_selector)

    @model_validator(mode="after")
    def _check_shape(self) -> PlacementRuleSpec:
        if self.type is RuleType.HOST:
            if self.mode is None or not self.host_selector:
                raise ValueError("a Host rule needs mode (must, should, mustNot) and host_selector")
            if self.enforcement is not None:
                raise ValueError("a Host rule's mode says whether it is required; leave enforcement out")
        elif self.mode is not None or self.host_selector:
            raise ValueError(f"mode and host_selector are for Host rules, not {self.type.value}")
        return self

    @property
    def required(self) -> bool:
        if self.type is RuleType.HOST:
            return self.mode is not HostMode.SHOULD
        return self.enforcement is not Enforcement.PREFERRED


class PlacementRuleStatus(BaseModel):
    pass


class PlacementRule(Resource):
    KIND: ClassVar[str] = "PlacementRule"
    PLURAL: ClassVar[str] = "placementrules"
    spec: PlacementRuleSpec
    status: PlacementRuleStatus = Field(default_factory=PlacementRuleStatus)
