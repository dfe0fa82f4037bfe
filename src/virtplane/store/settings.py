"""Reading and writing settings: registry definitions merged with stored overrides."""

from __future__ import annotations

import time
from typing import Any

from virtplane.domain.resources import Metadata, Setting, SettingSpec, SettingStatus
from virtplane.domain.settings import REGISTRY, SettingDef, definition
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
            scope=d.scope,
        ),
    )


class Settings:
    """Typed access to settings. Reads are cached for ``ttl_s`` (controllers read them often)."""

    def __init__(self, store: Store, *, ttl_s: float = 1.0) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._cache: dict[str, Any] = {}
        self._cached_at = float("-inf")

    def _overrides(self) -> dict[str, Any]:
        now = time.monotonic()
        if now - self._cached_at > self._ttl_s:
            self._cache = {s.metadata.name: s.spec.value for s in self._store.list_objects(Setting)}
            self._cached_at = now
        return self._cache

    def invalidate(self) -> None:
        self._cached_at = float("-inf")

    def get(self, key: str) -> Any:
        d = definition(key)
        return self._overrides().get(key, d.default)

    def get_int(self, key: str) -> int:
        return int(self.get(key))

    def get_float(self, key: str) -> float:
        return float(self.get(key))

    def get_bool(self, key: str) -> bool:
        return bool(self.get(key))

    def get_str(self, key: str) -> str:
        return str(self.get(key))

    def describe(self, key: str) -> Setting:
        d = definition(key)
        stored = self._store.find(Setting, key)
        rendered = _render(d, stored.spec.value if stored else d.default)
        if stored is not None:
            rendered.metadata = stored.metadata
        return rendered

    def describe_all(self) -> list[Setting]:
        stored = {s.metadata.name: s for s in self._store.list_objects(Setting)}
        result = []
        for key in sorted(REGISTRY):
            d = REGISTRY[key]
            s = stored.get(key)
            rendered = _render(d, s.spec.value if s else d.default)
            if s is not None:
                rendered.metadata = s.metadata
            result.append(rendered)
        return result

    def set(self, key: str, raw: Any, *, expected_version: int | None = None) -> Setting:
        """Validate and store a value; raises SettingError with what is allowed."""
        d = definition(key)
        value = d.parse(raw)
        existing = self._store.find(Setting, key)
        if existing is None:
            self._store.create(Setting(metadata=Metadata(name=key), spec=SettingSpec(value=value)))
        else:
            if expected_version is not None:
                existing.metadata.resource_version = expected_version
            existing.spec.value = value
            self._store.update(existing)
        self.invalidate()
        return self.describe(key)

    def reset(self, key: str) -> Setting:
        definition(key)
        if self._store.find(Setting, key) is not None:
            self._store.delete(Setting, key)
        self.invalidate()
        return self.describe(key)
