"""A setting: a registry key's value, globally or per cluster or host."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field

from virtplane.domain.base import Name, Resource, Strict


class SettingSpec(Strict):
    value: Any = None
    clusters: dict[Name, Any] = Field(
        default_factory=dict, description="Cluster -> value, for settings of scope host."
    )
    hosts: dict[Name, Any] = Field(
        default_factory=dict, description="Host -> value, for settings of scope host."
    )


class SettingStatus(BaseModel):
    type: str = ""
    default: Any = None
    allowed: list[Any] | None = None
    description: str = ""
    scope: str = "global"


class Setting(Resource):
    KIND: ClassVar[str] = "Setting"
    PLURAL: ClassVar[str] = "settings"
    NAME_IS_DNS_LABEL: ClassVar[bool] = False
    spec: SettingSpec = Field(default_factory=SettingSpec)
    status: SettingStatus = Field(default_factory=SettingStatus)
