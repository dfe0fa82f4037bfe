"""A replica's change feed that fell behind retention reads every object again instead of
going on with changes missing."""

from __future__ import annotations

from virtplane.domain.resources import Metadata, Secret, SecretSpec
from virtplane.runtime.cache import Cache
from virtplane.store.feed import ChangeFeed
from virtplane.store.store import Store


def secret(name: str) -> Secret:
    return Secret(metadata=Metadata(name=name), spec=SecretSpec(username="u", password="p"))


def test_a_feed_behind_the_pruned_horizon_resyncs_its_cache(store: Store) -> None:
    for name in ("kept", "gone", "changed"):
        store.create(secret(name))
    cache = Cache(store)
    feed = ChangeFeed(store, resync=cache.resync)
    feed.subscribe(cache.apply)
    feed.revision = cache.load()
    # meanwhile (this replica paused), the leader's writes and its pruning
    store.delete(Secret, "gone")
    changed = store.get(Secret, "changed")
    changed.metadata.labels = {"v": "2"}
    store.update(changed)
    store.create(secret("new"))
    store.compact_changes(keep_last=1)
    assert store.compacted_revision() > feed.revision

    feed.pump()
    assert sorted(cache.names("Secret")) == ["changed", "kept", "new"]
    changed_held = cache.get(Secret, "changed")
    assert changed_held is not None and changed_held.metadata.labels == {"v": "2"}
    assert feed.revision == store.revision()
