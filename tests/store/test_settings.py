from __future__ import annotations

import pytest

from virtplane.domain.resources import Setting
from virtplane.domain.settings import REGISTRY, SettingError, SettingType, definition
from virtplane.store import Store
from virtplane.store.settings import Settings


def test_defaults_come_from_the_registry(store: Store) -> None:
    settings = Settings(store)
    assert settings.get("host.maintenance.local.storage.strategy") == "Error"
    assert settings.get_int("migration.max_outbound_per_host") == 2
    assert settings.get_int("migration.max_inbound_per_host") == 1
    assert settings.get_int("migration.max_per_cluster") == 5
    assert settings.get_bool("host.maintenance.return_vms") is False


def test_set_parses_strings_by_type_and_persists(store: Store) -> None:
    settings = Settings(store)
    settings.set("migration.max_per_cluster", "7")
    settings.set("host.maintenance.return_vms", "true")
    fresh = Settings(store)
    assert fresh.get("migration.max_per_cluster") == 7
    assert fresh.get("host.maintenance.return_vms") is True
    described = fresh.describe("migration.max_per_cluster")
    assert described.status.default == 5 and described.status.type == "int"


@pytest.mark.parametrize(
    ("key", "value", "expected_words"),
    [
        ("host.maintenance.local.storage.strategy", "Sometimes", ["Error", "Migration", "ForceStop", "Stop"]),
        ("migration.max_per_cluster", "many", ["whole number"]),
        ("migration.max_per_cluster", "0", ["minimum"]),
        ("host.maintenance.return_vms", "perhaps", ["true or false"]),
    ],
)
def test_bad_values_are_refused_with_what_is_allowed(
    store: Store, key: str, value: str, expected_words: list[str]
) -> None:
    with pytest.raises(SettingError) as info:
        Settings(store).set(key, value)
    for word in expected_words:
        assert word in str(info.value)


def test_unknown_keys_are_refused_with_the_known_ones(store: Store) -> None:
    with pytest.raises(SettingError) as info:
        Settings(store).set("no.such.key", "1")
    assert "host.maintenance.local.storage.strategy" in str(info.value)


def test_reset_returns_to_default(store: Store) -> None:
    settings = Settings(store)
    settings.set("migration.max_attempts", 9)
    assert settings.get("migration.max_attempts") == 9
    settings.reset("migration.max_attempts")
    assert settings.get("migration.max_attempts") == 3


def test_every_default_is_valid_for_its_own_definition() -> None:
    for key, d in REGISTRY.items():
        assert d.parse(d.default) == d.default, key
        assert definition(key) is d
        assert d.type in SettingType


def test_overrides_per_cluster_and_host_are_stored_and_resolved(store: Store) -> None:
    settings = Settings(store)
    key = "host.cpu_allocation_ratio"
    settings.set(key, "8", cluster="batch")
    settings.set(key, 1, host="h1")
    fresh = Settings(store)
    assert fresh.get(key) == 4.0  # the global value is still the default
    assert fresh.get_float(key, cluster="batch", host="h2") == 8.0
    assert fresh.get_float(key, cluster="batch", host="h1") == 1.0
    described = fresh.describe(key)
    assert (described.spec.value, described.spec.clusters, described.spec.hosts) == (
        4.0,
        {"batch": 8.0},
        {"h1": 1.0},
    )
    assert described.status.scope == "host"

    fresh.set(key, 2)  # the global value changes, the overrides stay
    assert (fresh.get(key, cluster="web"), fresh.get(key, cluster="batch")) == (2.0, 8.0)
    fresh.reset(key)  # back to the default; the overrides stay
    assert (fresh.get(key), fresh.get(key, host="h1")) == (4.0, 1.0)
    fresh.reset(key, host="h1")
    assert fresh.get(key, cluster="batch", host="h1") == 8.0
    fresh.reset(key, cluster="batch")
    assert store.find(Setting, key) is None, "nothing left to store"


@pytest.mark.parametrize(
    ("key", "value", "scope", "words"),
    [
        ("migration.max_attempts", 5, {"cluster": "batch"}, "global setting"),
        ("host.cpu_allocation_ratio", 2, {"cluster": "batch", "host": "h1"}, "not both"),
        ("host.cpu_allocation_ratio", 0, {"host": "h1"}, "minimum"),
    ],
)
def test_bad_overrides_are_refused(
    store: Store, key: str, value: object, scope: dict[str, str], words: str
) -> None:
    with pytest.raises(SettingError, match=words):
        Settings(store).set(key, value, **scope)
    assert store.find(Setting, key) is None
