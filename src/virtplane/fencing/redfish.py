"""A host's BMC over Redfish (DMTF), through the ``sushy`` client.

sushy is synchronous (requests): each call runs in a thread, bounded by the timeout
(sushy's own connect/read timeouts, and ``asyncio.wait_for`` around the thread). Basic
authentication is used on every request, so no Redfish session is left behind on the
BMC when the control plane dies mid-fence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import sushy
from sushy import auth, exceptions

from virtplane.domain.resources import Host, RedfishFencing, Secret
from virtplane.fencing.base import (
    BmcCredentialsRejected,
    BmcError,
    BmcSystemNotFound,
    BmcUnreachable,
    PowerState,
)

T = TypeVar("T")

_POWER = {
    sushy.POWER_STATE_ON: PowerState.ON,
    sushy.POWER_STATE_OFF: PowerState.OFF,
    sushy.POWER_STATE_POWERING_ON: PowerState.POWERING_ON,
    sushy.POWER_STATE_POWERING_OFF: PowerState.POWERING_OFF,
}


class RedfishBmc:
    def __init__(self, config: RedfishFencing, username: str, password: str, timeout_s: float) -> None:
        self.config = config
        self._username = username
        self._password = password
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # no credentials in a log line
        return f"RedfishBmc({self.config.address}, system {self.config.system_id})"

    def _system(self) -> sushy.resources.system.system.System:
        root = sushy.Sushy(
            self.config.address.rstrip("/"),
            auth=auth.BasicAuth(self._username, self._password),
            verify=self.config.verify_tls,
            server_side_retries=0,
            connect_timeout=self.timeout_s,
            read_timeout=self.timeout_s,
        )
        return root.get_system(f"/redfish/v1/Systems/{self.config.system_id}")

    async def _call(self, what: str, work: Callable[[], T]) -> T:
        where = f"BMC {self.config.address} (system {self.config.system_id})"
        try:
            return await asyncio.wait_for(asyncio.to_thread(work), self.timeout_s * 2 + 1)
        except TimeoutError:
            raise BmcUnreachable(f"{where} did not answer {what} within {self.timeout_s:g}s") from None
        except exceptions.AccessError as exc:
            raise BmcCredentialsRejected(f"{where} rejected the credentials ({exc.status_code})") from None
        except exceptions.ResourceNotFoundError:
            raise BmcSystemNotFound(f"{where} has no system {self.config.system_id}") from None
        except exceptions.ConnectionError as exc:
            raise BmcUnreachable(f"{where} cannot be reached: {_short(exc)}") from None
        except exceptions.SushyError as exc:
            raise BmcError(f"{where}: {what} failed: {_short(exc)}") from None

    async def power_state(self) -> PowerState:
        state = await self._call("the power state", lambda: self._system().power_state)
        return _POWER.get(state, PowerState.UNKNOWN)

    async def force_off(self) -> None:
        await self._call("ForceOff", lambda: self._system().reset_system(sushy.RESET_FORCE_OFF))


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def redfish_bmc(host: Host, secret: Secret, timeout_s: float) -> RedfishBmc:
    fencing = host.spec.fencing
    assert fencing is not None and fencing.redfish is not None
    return RedfishBmc(fencing.redfish, secret.spec.username, secret.spec.password or "", timeout_s)
