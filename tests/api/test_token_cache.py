"""The API's token cache: bounded in entries and in bytes, entries expire, the least recently
used leave first, and only tokens the store knows are kept (with the real store)."""

from __future__ import annotations

from virtplane.api.auth import MAX_TOKEN_CHARS, TokenCache
from virtplane.api.token_cache import ENTRY_OVERHEAD_BYTES, BoundedCache
from virtplane.store.store import Store


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_entries_are_bounded_and_the_least_recently_used_leave_first() -> None:
    cache: BoundedCache[int] = BoundedCache(max_entries=3, max_bytes=10**6, ttl_s=60, clock=Clock())
    for i in range(3):
        cache.put(f"k{i}", i)
    assert cache.get("k0") == 0  # now the most recently used
    cache.put("k3", 3)
    assert len(cache) == 3
    assert (cache.get("k1"), cache.get("k0"), cache.get("k3")) == (None, 0, 3)


def test_bytes_are_bounded() -> None:
    key_cost = 100 + ENTRY_OVERHEAD_BYTES
    cache: BoundedCache[int] = BoundedCache(max_entries=1000, max_bytes=key_cost * 2, ttl_s=60, clock=Clock())
    for i in range(10):
        cache.put(f"{i}".zfill(100), i)
    assert len(cache) == 2 and cache.bytes == key_cost * 2
    cache.put("x" * 10_000, 1)  # alone larger than the bound: not kept
    assert len(cache) == 2 and cache.get("x" * 10_000) is None


def test_entries_expire() -> None:
    clock = Clock()
    cache: BoundedCache[int] = BoundedCache(max_entries=10, max_bytes=10**6, ttl_s=5, clock=clock)
    cache.put("k", 1)
    clock.now = 4.9
    assert cache.get("k") == 1
    clock.now = 5.0
    assert cache.get("k") is None and len(cache) == 0 and cache.bytes == 0


def test_only_known_tokens_are_cached(store: Store) -> None:
    tokens = TokenCache(store)
    known = store.create_token("ci", "operator")
    for i in range(100):
        assert tokens.lookup(f"vp_wrong-{i}") is None
    assert len(tokens.entries) == 0
    looked_up: list[str] = []
    token_role = store.token_role

    def recorded(token: str) -> tuple[str, str] | None:
        looked_up.append(token)
        return token_role(token)

    store.token_role = recorded  # type: ignore[method-assign]
    assert tokens.lookup("t" * (MAX_TOKEN_CHARS + 1)) is None
    assert looked_up == [], "a token longer than any we make is refused before the store is asked"
    principal = tokens.lookup(known)
    assert principal is not None and principal.name == "ci"
    assert len(tokens.entries) == 1
