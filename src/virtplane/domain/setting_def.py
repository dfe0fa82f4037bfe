"""What a setting is: its type, scope, bounds, and how a value is parsed and resolved.

Pure. The registry of every setting is ``domain.settings``; this module holds the kinds it
is made of, so that the registry's module stays about the settings themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class SettingType(StrEnum):
    STRING = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"


class SettingScope(StrEnum):
    GLOBAL = "global"
    HOST = "host"
    """A global value, overridable per cluster and per host."""
    CLUSTER = "cluster"
    """A global value, overridable per cluster only (what every host of a cluster must share)."""


class SettingError(ValueError):
    """A setting key is unknown or a value is not allowed; the message says what is."""


@dataclass(frozen=True)
class ScopedValues:
    """What is stored for one setting: the global value and the overrides by cluster and host."""

    value: Any
    clusters: Mapping[str, Any] = field(default_factory=dict)
    hosts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SettingDef:
    key: str
    type: SettingType
    default: Any
    description: str
    allowed: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    scope: SettingScope = SettingScope.GLOBAL

    def check_scope(self, *, cluster: str | None, host: str | None) -> None:
        """Raise unless a value may be set (or reset) for this cluster or host."""
        if cluster is not None and host is not None:
            raise SettingError(f"{self.key}: give a cluster or a host, not both")
        if (cluster is not None or host is not None) and self.scope is SettingScope.GLOBAL:
            raise SettingError(f"{self.key} is a global setting: it cannot be set per cluster or host")
        if host is not None and self.scope is SettingScope.CLUSTER:
            raise SettingError(f"{self.key} is set per cluster: every host of a cluster shares it")

    def effective(
        self, stored: ScopedValues | None, *, cluster: str | None = None, host: str | None = None
    ) -> Any:
        """The value that applies to ``host`` in ``cluster``: the host's override, else the
        cluster's, else the global value, else the default."""
        if stored is None:
            return self.default
        if self.scope is SettingScope.HOST and host is not None and host in stored.hosts:
            return stored.hosts[host]
        if self.scope is not SettingScope.GLOBAL and cluster is not None and cluster in stored.clusters:
            return stored.clusters[cluster]
        return stored.value

    def parse(self, raw: Any) -> Any:
        """Turn ``raw`` (a typed value, or a string from the CLI) into a valid value, or raise."""
        value = self._coerce(raw)
        if self.allowed is not None and value not in self.allowed:
            allowed = ", ".join(str(a) for a in self.allowed)
            raise SettingError(f"{self.key}: {raw!r} is not allowed; use one of: {allowed}")
        if self.minimum is not None and value < self.minimum:
            raise SettingError(f"{self.key}: {value} is below the minimum {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise SettingError(f"{self.key}: {value} is above the maximum {self.maximum:g}")
        return value

    def _coerce(self, raw: Any) -> Any:
        expected = f"{self.key} takes a {self.type.value}"
        if self.type is SettingType.BOOL:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.lower() in ("true", "false", "yes", "no", "1", "0", "on", "off"):
                return raw.lower() in ("true", "yes", "1", "on")
            raise SettingError(f"{expected} (true or false), got {raw!r}")
        if self.type is SettingType.INT:
            if isinstance(raw, bool):
                raise SettingError(f"{expected}, got {raw!r}")
            if isinstance(raw, int):
                return raw
            if isinstance(raw, str):
                try:
                    return int(raw.strip())
                except ValueError:
                    pass
            raise SettingError(f"{expected} (a whole number), got {raw!r}")
        if self.type is SettingType.FLOAT:
            if isinstance(raw, bool):
                raise SettingError(f"{expected}, got {raw!r}")
            if isinstance(raw, int | float):
                return float(raw)
            if isinstance(raw, str):
                try:
                    return float(raw.strip())
                except ValueError:
                    pass
            raise SettingError(f"{expected} (a number), got {raw!r}")
        if not isinstance(raw, str):
            raise SettingError(f"{expected}, got {raw!r}")
        return raw
