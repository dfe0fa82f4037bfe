"""The guest agent operations of the libvirt driver: is it connected, the guest's addresses,
a shutdown by the agent, filesystem freeze and thaw.

libvirt talks to the guest's qemu-ga over the domain's org.qemu.guest_agent.0 channel
(``domain_xml``). Whether the agent has the channel open is the live definition's channel
state, which libvirt keeps from QEMU's port events (and announces with its agent lifecycle
event, ``events``). An agent call fails at once when no agent is connected, and after
libvirt's agent timeout (5 s) when one is connected but does not answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from virtplane.drivers.base import GuestInterface
from virtplane.drivers.errors import AgentUnavailable, Unsupported
from virtplane.drivers.libvirt import _libvirt, stop_requests
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import agent_channel_state
from virtplane.drivers.libvirt.lifecycle import DomainLifecycle

T = TypeVar("T")

# libvirt's ways of saying that no agent answers: not connected or not answering, out of
# sync, no channel configured (a domain defined before it had one), the domain is not running
_NO_AGENT = (
    "VIR_ERR_AGENT_UNRESPONSIVE",
    "VIR_ERR_AGENT_UNSYNCED",
    "VIR_ERR_ARGUMENT_UNSUPPORTED",
    "VIR_ERR_OPERATION_INVALID",
)


def interfaces(reported: dict[str, Any]) -> tuple[GuestInterface, ...]:
    """libvirt's ``interfaceAddresses`` answer as ``GuestInterface``s, sorted by name."""
    found = []
    for name, interface in sorted(reported.items()):
        addresses = tuple(f"{a['addr']}/{a['prefix']}" for a in interface.get("addrs") or ())
        found.append(GuestInterface(name=name, mac=str(interface.get("hwaddr") or ""), addresses=addresses))
    return tuple(found)


class GuestAgentOperations(DomainLifecycle):
    async def agent_connected(self, name: str) -> bool:
        lv = _libvirt.load()

        def connected(conn: Any) -> bool:
            dom = LibvirtDomain.find(conn, name)
            if dom is None or not dom.is_active():
                return False
            if not self.flavor.agent_channel:
                return bool(dom.state()[0] == lv.VIR_DOMAIN_RUNNING)
            return agent_channel_state(dom.xml()) == "connected"

        return await self._call(connected)

    async def guest_interfaces(self, name: str) -> tuple[GuestInterface, ...]:
        return interfaces(await self._agent_call(name, lambda dom: dom.agent_interfaces()))

    async def agent_shutdown(self, name: str) -> None:
        if not self.flavor.agent_shutdown:
            raise Unsupported(f"{self._uri} cannot shut a guest down through its agent")

        def shutdown(dom: LibvirtDomain) -> None:
            self._stops.request(name)  # as for the power button: the stop is ours, not the guest's
            stop_requests.set_mark(dom, True)
            dom.shutdown_by_agent()

        await self._agent_call(name, shutdown)

    async def freeze_filesystems(self, name: str) -> int:
        return await self._agent_call(name, lambda dom: dom.freeze_filesystems())

    async def thaw_filesystems(self, name: str) -> int:
        return await self._agent_call(name, lambda dom: dom.thaw_filesystems())

    async def _agent_call(self, name: str, fn: Callable[[LibvirtDomain], T]) -> T:
        lv = _libvirt.load()
        no_agent = {getattr(lv, code) for code in _NO_AGENT if hasattr(lv, code)}

        def call(conn: Any) -> T:
            dom = LibvirtDomain.lookup(conn, name)
            if not dom.is_active():
                raise AgentUnavailable(f"domain {name} is not running: no guest agent answers")
            try:
                return fn(dom)
            except lv.libvirtError as exc:
                if _libvirt.error_code(exc) in no_agent:
                    raise AgentUnavailable(f"domain {name}: {exc}") from exc
                raise

        return await self._call(call)


__all__ = ["GuestAgentOperations", "interfaces"]
