"""Marking what changed in the simulated world, by construction.

With a state file every change must reach the file before the entry point that made it
returns. No call site is asked to remember that: the persisted state lives only in

- ``Record``s, whose persisted fields are ``Persisted`` descriptors: assigning one a
  different value marks the record;
- ``RecordMap``s, keyed collections whose ``put`` and ``pop`` mark the key.

Persisted fields hold immutable values (frozen dataclasses, tuples, frozensets,
read-only mappings), so an assignment is the only way to change one. A mark keeps the
latest value of its key (None once removed) in the ``ChangeLog``, the one port through
which the simulator's parts reach the state file; ``_persist`` writes what the log holds
when the outermost entry point ends. Without a state file the log records nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from enum import StrEnum
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Key = tuple[str, ...]


class Entity(StrEnum):
    """What a state file row holds: one table each."""

    HOST = "host"
    DOMAIN = "domain"
    POOL = "pool"
    VOLUME = "volume"
    SNAPSHOT = "snapshot"
    MEMORY = "memory"
    DIRTY_RATE = "dirty-rate"
    MIGRATION = "migration"


class ChangeLog:
    """The latest value of every key marked since the last write (None: removed)."""

    def __init__(self) -> None:
        self.recording = False
        self._changes: dict[Entity, dict[Key, object]] = {}

    def mark(self, entity: Entity, key: Key, value: object) -> None:
        if self.recording:
            self._changes.setdefault(entity, {})[key] = value

    @property
    def pending(self) -> bool:
        return bool(self._changes)

    def changes(self) -> Mapping[Entity, Mapping[Key, object]]:
        return self._changes

    def clear(self) -> None:
        self._changes = {}


class Record:
    """A persisted entity. A ``RecordMap`` binds it to its key when it is put there and
    unbinds it when it is popped, so a record that left the world marks nothing."""

    _log: ChangeLog | None = None
    _entity: Entity
    _key: Key

    def _bind(self, log: ChangeLog, entity: Entity, key: Key) -> None:
        self._log, self._entity, self._key = log, entity, key

    def _unbind(self) -> None:
        self._log = None

    def _mark(self) -> None:
        if self._log is not None:
            self._log.mark(self._entity, self._key, self)


_UNSET = object()


class Persisted(Generic[T]):
    """A field of a ``Record`` that the state file keeps: assigning it a new value marks the record."""

    def __set_name__(self, owner: type[Record], name: str) -> None:
        self._slot = f"_persisted_{name}"

    @overload
    def __get__(self, record: None, owner: type[Any]) -> Persisted[T]: ...

    @overload
    def __get__(self, record: Record, owner: type[Any]) -> T: ...

    def __get__(self, record: Record | None, owner: type[Any]) -> Persisted[T] | T:
        if record is None:
            return self
        value: T = getattr(record, self._slot)
        return value

    def __set__(self, record: Record, value: T) -> None:
        if getattr(record, self._slot, _UNSET) != value:
            setattr(record, self._slot, value)
            record._mark()


class RecordMap(Mapping[K, V]):
    """A keyed collection of persisted values; its key in the log is ``prefix`` + the key.
    Read it as a mapping; change it only with ``put`` and ``pop``, which mark."""

    def __init__(self, log: ChangeLog, entity: Entity, prefix: Key = ()) -> None:
        self._log = log
        self._entity = entity
        self._prefix = prefix
        self._items: dict[K, V] = {}

    def put(self, key: K, value: V) -> V:
        self.load(key, value)
        self._log.mark(self._entity, self._full_key(key), value)
        return value

    def pop(self, key: K) -> V | None:
        """Remove ``key``; None when it was not there."""
        value = self._items.pop(key, None)
        if value is None:
            return None
        if isinstance(value, Record):
            value._unbind()
        self._log.mark(self._entity, self._full_key(key), None)
        return value

    def load(self, key: K, value: V) -> None:
        """Take a value as the state file holds it: bound, not marked."""
        replaced = self._items.get(key)
        if isinstance(replaced, Record) and replaced is not value:
            replaced._unbind()
        self._items[key] = value
        if isinstance(value, Record):
            value._bind(self._log, self._entity, self._full_key(key))

    def _full_key(self, key: K) -> Key:
        return self._prefix + (tuple(key) if isinstance(key, tuple) else (str(key),))

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["ChangeLog", "Entity", "Key", "Persisted", "Record", "RecordMap"]
