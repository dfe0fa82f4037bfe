"""Reading and writing settings: registry definitions merged with stored overrides."""

from __future__ import annotations

import time
from typing import Any

from virtplane.domain.resources import Metadata, Setting, SettingSpec, SettingStatus
from virtplane.domain.settings import REGISTRY, ScopedValues, SettingDef, definition
from virtplane.store.store import Store


def _render(d: SettingDef, value: Any) -> Setting:
    return Setting(
        metadata=Metadata(name=d.key),
        spec=SettingSpec(value=value),
        status=SettingStatus(
            type=d.type.value,
            default=d.default,
            allowed=list(d.allowed) if d.allowed is not None else None,
            description=d.description,
            scope=d.scope.value,
        ),
    )


def _scoped(spec: SettingSpec) -> ScopedValues:
    return ScopedValues(spec.value, dict(spec.clusters), dict(spec.hosts))


def _render_stored(d: SettingDef, stored: Setting | None) -> Setting:
    rendered = _render(d, stored.spec.value if stored else d.default)
    if stored is not None:
        rendered.metadata = stored.metadata
        rendered.spec = stored.spec.model_copy(deep=True)
    return rendered


class Settings:
    """Typed access to settings. Reads are cached for ``ttl_s`` (controllers read them often)."""

    def __init__(self, store: Store, *, ttl_s: float = 1.0) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._cache: dict[str, ScopedValues] = {}
        self._cached_at = float("-inf")

    def _overrides(self) -> dict[str, ScopedValues]:
        now = time.monotonic()
        if now - self._cached_at > self._ttl_s:
            self._cache = {s.metadata.name: _scoped(s.spec) for s in self._store.list_objects(Setting)}
            self._cached_at = now
        return self._cache

    def invalidate(self) -> None:
        self._cached_at = float("-inf")

    def get(self, key: str, *, cluster: str | None = None, host: str | None = None) -> Any:
        """The value; for a setting of scope host, the one that applies to ``host`` in ``cluster``."""
        return definition(key).effective(self._overrides().get(key), cluster=cluster, host=host)

    def get_int(self, key: str) -> int:
        return int(self.get(key))

    def get_float(self, key: str, *, cluster: str | None = None, host: str | None = None) -> float:
        return float(self.get(key, cluster=cluster, host=host))

    def get_bool(self, key: str) -> bool:
        return bool(self.get(key))

    def get_str(self, key: str, *, cluster: str | None = None, host: str | None = None) -> str:
        return str(self.get(key, cluster=cluster, host=host))

    def describe(self, key: str) -> Setting:
        return _render_stored(definition(key), self._store.find(Setting, key))

    def describe_all(self) -> list[Setting]:
        stored = {s.metadata.name: s for s in self._store.list_objects(Setting)}
        return [_render_stored(REGISTRY[key], stored.get(key)) for key in sorted(REGISTRY)]

    def set(
        self,
        key: str,
        raw: Any,
        *,
        cluster: str | None = None,
        host: str | None = None,
        expected_version: int | None = None,
    ) -> Setting:
        """Validate and store a value, the global one or a cluster's or host's override;
        raises SettingError with what is allowed."""
        d = definition(key)
        d.check_scope(cluster=cluster, host=host)
        value = d.parse(raw)
        existing = self._store.find(Setting, key)
        setting = existing or Setting(metadata=Metadata(name=key), spec=SettingSpec(value=d.default))
        if cluster is not None:
            setting.spec.clusters = {**setting.spec.clusters, cluster: value}
        elif host is not None:
            setting.spec.hosts = {**setting.spec.hosts, host: value}
        else:
            setting.spec.value = value
        if existing is None:
            self._store.create(setting)
        else:
            if expected_version is not None:
                setting.metadata.resource_version = expected_version
            self._store.update(setting)
        self.invalidate()
        return self.describe(key)

    def reset(self, key: str, *, cluster: str | None = None, host: str | None = None) -> Setting:
        """Back to the default (the overrides stay), or drop one cluster's or host's override."""
        d = definition(key)
        d.check_scope(cluster=cluster, host=host)
        existing = self._store.find(Setting, key)
        if existing is not None:
            spec = existing.spec
            if cluster is not None:
                spec.clusters = {k: v for k, v in spec.clusters.items() if k != cluster}
            elif host is not None:
                spec.hosts = {k: v for k, v in spec.hosts.items() if k != host}
            else:
                spec.value = d.default
            if spec.value == d.default and not spec.clusters and not spec.hosts:
                self._store.delete(Setting, key)
            else:
                self._store.update(existing)
        self.invalidate()
        return self.describe(key)
