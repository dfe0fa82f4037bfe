"""Store errors. The API maps them to HTTP codes (404, 409, 409)."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store's errors."""


class NotFound(StoreError):
    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} not found")
        self.kind = kind
        self.name = name


class AlreadyExists(StoreError):
    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} already exists")
        self.kind = kind
        self.name = name


class Conflict(StoreError):
    """A write was based on a stale resource_version: re-read and try again."""

    def __init__(self, kind: str, name: str, expected: int, actual: int) -> None:
        super().__init__(
            f"{kind} {name!r} was changed by someone else (your resource_version {expected}, "
            f"current {actual}): read it again and retry"
        )
        self.kind = kind
        self.name = name
        self.expected = expected
        self.actual = actual


class StatusOnly(StoreError):
    """A controller's status write would have changed what only the API writes (a bug)."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r}: a status write may not change spec, labels or user annotations")
        self.kind = kind
        self.name = name
