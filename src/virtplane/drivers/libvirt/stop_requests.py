"""Who stopped a domain: the stop requests the control plane made.

libvirt reports a clean guest power-off as state reason "shutdown" whoever pressed the
button. Before ``shutdown()`` presses it the driver records a stop request, in memory
and in the domain's persistent metadata, and ``start()`` clears it; so a guest that
powers itself off is GUEST_SHUTDOWN and one we shut down is STOPPED_BY_SYSTEM, also
after the control plane restarts (the metadata outlives the process).
"""

from __future__ import annotations

import threading

from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import STOP_NS, STOP_PREFIX, parse_stop_request, stop_request_xml


def marked(dom: LibvirtDomain) -> bool:
    """Whether the domain's persistent metadata holds our stop request."""
    xml = dom.metadata(STOP_NS)
    return xml is not None and parse_stop_request(xml)


def set_mark(dom: LibvirtDomain, requested: bool) -> None:
    dom.set_metadata(STOP_NS, STOP_PREFIX, stop_request_xml(True) if requested else None)


class StopRequests:
    """The stop requests of one driver: in memory for the event callbacks (which must not
    call libvirt), in the domain's metadata for the next process."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def asked(self, name: str) -> bool:
        """Whether this process asked ``name`` to stop (memory only)."""
        with self._lock:
            return name in self._names

    def asked_for(self, dom: LibvirtDomain) -> bool:
        """Whether anyone of ours asked ``dom`` to stop: this process or an earlier one."""
        return self.asked(dom.name) or marked(dom)

    def request(self, name: str) -> None:
        """Record a stop request in memory; ``set_mark`` records it in the domain."""
        with self._lock:
            self._names.add(name)

    def clear(self, dom: LibvirtDomain) -> None:
        """The domain is started again: it was not stopped by anyone."""
        self.forget(dom.name)
        set_mark(dom, False)

    def forget(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)


__all__ = ["StopRequests", "marked", "set_mark"]
