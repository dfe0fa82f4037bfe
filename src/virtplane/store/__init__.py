"""Durable state: SQLAlchemy over SQLite (embedded) or PostgreSQL."""

from virtplane.store.changes import Change
from virtplane.store.database import sqlite_url, utcnow
from virtplane.store.errors import AlreadyExists, Conflict, NotFound, StoreError
from virtplane.store.feed import ChangeFeed
from virtplane.store.store import Store

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
