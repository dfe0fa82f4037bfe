"""Durable state: SQLAlchemy over SQLite (embedded) or PostgreSQL."""

from virtplane.store.errors import AlreadyExists, Conflict, NotFound, StoreError
from virtplane.store.feed import ChangeFeed
from virtplane.store.store import Change, Store, sqlite_url, utcnow

__all__ = [
    "AlreadyExists",
    "Change",
    "ChangeFeed",
    "Conflict",
    "NotFound",
    "Store",
    "StoreError",
    "sqlite_url",
    "utcnow",
]
