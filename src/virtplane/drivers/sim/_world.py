"""What a simulated host's connection reaches of the world, and the wrapper of its entry points."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from virtplane.drivers.base import DomainSpec

if TYPE_CHECKING:
    from ._backups import SimBackups
    from ._guest import SimGuests
    from ._host import SimHost
    from ._migration import MigrationEngine
    from ._storage import SimStorage
    from ._usage import SimMeters

P = ParamSpec("P")
R = TypeVar("R")


class SimWorld(Protocol):
    """What a connection reaches of the world (``SimCloud`` is one)."""

    @property
    def transaction(self) -> AbstractContextManager[None]: ...

    @property
    def storage(self) -> SimStorage: ...

    @property
    def migrations(self) -> MigrationEngine: ...

    def host_by_uri(self, uri: str) -> SimHost | None: ...

    def save_memory(self, handle: str, spec: DomainSpec, memory: str) -> None: ...

    def saved_memory(self, handle: str) -> tuple[DomainSpec, str] | None: ...

    def forget_memory(self, handle: str) -> None: ...

    @property
    def guests(self) -> SimGuests: ...

    @property
    def backups(self) -> SimBackups: ...

    @property
    def meters(self) -> SimMeters: ...


class Connection(Protocol):
    @property
    def world(self) -> SimWorld: ...


C = TypeVar("C", bound=Connection)


def entry_point(
    method: Callable[Concatenate[C, P], Awaitable[R]],
) -> Callable[Concatenate[C, P], Coroutine[Any, Any, R]]:
    """Run a driver call inside the world's transaction, so that with a state file what it
    changed is committed before it returns. The calls never suspend (the simulator does
    its work synchronously), so no other call runs inside the transaction."""

    @functools.wraps(method)
    async def call(self: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.world.transaction:
            return await method(self, *args, **kwargs)

    return call


__all__ = ["Connection", "SimWorld", "entry_point"]
