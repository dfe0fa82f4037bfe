"""A secret: credentials (a BMC's) that the API never returns."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from virtplane.domain.base import Resource, Strict


class SecretSpec(Strict):
    """Credentials (a BMC's). Write-only: the API never returns ``password``."""

    username: str = Field(min_length=1, max_length=255)
    password: str | None = Field(
        default=None,
        max_length=1024,
        repr=False,  # never in a log line or a traceback
        description="Required on create; a write without it keeps the stored one. Never returned.",
    )


class SecretStatus(BaseModel):
    password_set: bool = False


class Secret(Resource):
    KIND: ClassVar[str] = "Secret"
    PLURAL: ClassVar[str] = "secrets"
    spec: SecretSpec
    status: SecretStatus = Field(default_factory=SecretStatus)
