"""How the libvirt driver calls libvirt: blocking calls on the call pool's threads, errors translated.

libvirt connections are thread-safe, so the pool's threads share one. A libvirt error
leaves as a ``virtplane.drivers.errors`` error; one that finds the connection dead also
marks it lost, so it is reopened. What the host can do is its ``HypervisorFlavor``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from virtplane.drivers.base import Capability
from virtplane.drivers.errors import DriverError, Unsupported
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.call_pool import CallPool
from virtplane.drivers.libvirt.connection import LibvirtConnection
from virtplane.drivers.libvirt.flavor import HypervisorFlavor

T = TypeVar("T")


class LibvirtCalls:
    """The part of ``LibvirtDriver`` every operation uses; ``LibvirtDriver.__init__`` sets it up."""

    _uri: str
    flavor: HypervisorFlavor
    _calls: CallPool
    _connection: LibvirtConnection

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def connected(self) -> bool:
        """False while the host is away (the control plane shows it Disconnected)."""
        return self._connection.connected

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.flavor.capabilities

    def _require(self, capability: Capability) -> None:
        if capability not in self.capabilities:
            raise Unsupported(f"{self._uri} does not support {capability.value}")

    async def _call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(virConnect)`` on the pool; libvirt errors become driver errors."""
        return await self._calls.run(lambda: self._call_blocking(fn))

    def _call_blocking(self, fn: Callable[[Any], T]) -> T:
        lv = _libvirt.load()
        with self._connection.using() as conn:  # not closed while the call is in it
            try:
                return fn(conn)
            except DriverError:
                raise
            except lv.libvirtError as exc:
                alive = self._connection.is_alive()
                if not alive:
                    self._connection.lost(str(exc))
                raise _libvirt.translate(exc, connection_alive=alive) from exc
