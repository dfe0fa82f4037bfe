"""Host liveness and fencing, run by the host controller after each probe (issue 15).

``track_liveness`` keeps the streak clocks (``silent_since`` / ``answering_since``) and
moves ``status.connection`` through the liveness table (domain/liveness.py).

``Fencer.step`` powers a Disconnected host with ``spec.fencing`` off through its BMC
once it has been silent for ``host.fencing.after_s``. DESIGN rule 1: the fence is
recorded on the host (``status.fence`` PoweringOff) before the BMC is asked; once
recorded it is carried through, since the ForceOff may have been sent. Off must be
confirmed by the BMC before anything else happens: then ``spec.fenced`` is set (the
latch an admin sets by hand too, and the only one that clears it), the host is Down,
and its VMs are released to recovery. A BMC that does not answer, rejects the
credentials or has no such system leaves the VMs waiting, with the reason on the host
(and, through it, on the VMs), and is tried again with a capped, doubling backoff.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from virtplane.controllers.context import Change, ControllerContext
from virtplane.domain.liveness import LivenessThresholds, fence_due, next_liveness, observe
from virtplane.domain.power import start_retry_delay
from virtplane.domain.resources import (
    FencePhase,
    FenceStatus,
    Host,
    HostConnection,
    HostStatus,
    Secret,
)
from virtplane.fencing.base import BmcError, BmcFactory, PowerState
from virtplane.store.sealing import SecretsKeyError
from virtplane.store.settings import Settings

log = logging.getLogger("virtplane.controllers.fencing")

__all__ = ["Fencer", "liveness_thresholds", "track_liveness"]


def liveness_thresholds(settings: Settings) -> LivenessThresholds:
    return LivenessThresholds(
        disconnected_after_s=settings.get_float("host.liveness.disconnected_after_s"),
        reconnected_after_s=settings.get_float("host.liveness.reconnected_after_s"),
        fence_after_s=settings.get_float("host.fencing.after_s"),
    )


def _age(since: datetime | None, now: datetime) -> float:
    return (now - since).total_seconds() if since is not None else 0.0


def track_liveness(
    host: Host,
    status: HostStatus,
    answered: bool,
    now: datetime,
    thresholds: LivenessThresholds,
    asked_at: datetime | None = None,
) -> float | None:
    """Update the streak clocks and ``status.connection``; the seconds until the next
    threshold could change it (None: nothing pending). A silence starts when the question that
    went unanswered was asked (``asked_at``), not when the wait for it ended."""
    fenced = host.spec.fenced
    if status.connection is HostConnection.DOWN and not fenced:
        # the admin cleared the fence: the host starts a fresh record (an old silence must
        # not fence it again at once)
        status.silent_since = status.answering_since = None
    if answered:
        status.silent_since = None
        status.answering_since = status.answering_since or now
    else:
        status.answering_since = None
        status.silent_since = status.silent_since or asked_at or now
    answering_for, silent_for = _age(status.answering_since, now), _age(status.silent_since, now)
    observation = observe(
        fenced=fenced,
        answers=answered,
        answering_for_s=answering_for,
        silent_for_s=silent_for,
        thresholds=thresholds,
    )
    status.connection = next_liveness(status.connection, observation)
    if fenced:
        return None
    if answered:
        if status.connection is HostConnection.DISCONNECTED:
            return max(0.0, thresholds.reconnected_after_s - answering_for)
        return None
    pending = [t - silent_for for t in (thresholds.disconnected_after_s, thresholds.fence_after_s)]
    return min((p for p in pending if p > 0), default=None)


@dataclass
class Fencer:
    ctx: ControllerContext
    bmc_factory: BmcFactory | None

    async def step(self, host: Host, status: HostStatus, now: datetime) -> tuple[Host, float | None]:
        """One fencing step for ``host``, whose ``status`` is being computed; returns the host
        as written (when this step wrote it) and when to look again."""
        fence = status.fence
        if host.spec.fenced:
            return host, None
        if fence is not None and fence.phase is FencePhase.FENCED:
            status.fence = None  # the admin cleared the fence: the host returns to service
            self.ctx.event(host, "FenceCleared", "spec.fenced cleared: the host may return to service")
            fence = None
        redfish = host.spec.fencing.redfish if host.spec.fencing else None
        settings = self.ctx.settings
        thresholds = liveness_thresholds(settings)
        in_progress = fence is not None and fence.phase is FencePhase.POWERING_OFF
        due = fence_due(status.connection, _age(status.silent_since, now), thresholds)
        if redfish is None or self.bmc_factory is None or not (due or in_progress):
            if fence is not None and not in_progress:
                status.fence = None
                self.ctx.event(
                    host, "FenceCancelled", "the host answers again (or has no fencing): not fenced"
                )
            return host, None
        retrying = fence is not None and fence.phase is FencePhase.RETRYING
        if retrying and fence is not None and fence.next_attempt_at and now < fence.next_attempt_at:
            return host, (fence.next_attempt_at - now).total_seconds()
        attempts = (fence.attempts if fence else 0) + (0 if in_progress else 1)
        status.fence = FenceStatus(
            phase=FencePhase.POWERING_OFF,
            attempts=attempts,
            started_at=fence.started_at if fence and fence.started_at else now,
            reason="PoweringOff",
            message=f"powering the host off through its BMC {redfish.address} (attempt {attempts})",
        )
        if not in_progress:
            self.ctx.event(
                host,
                "Fencing",
                f"silent for {_age(status.silent_since, now):.0f}s: powering it off through its BMC "
                f"{redfish.address} (attempt {attempts})",
                warning=True,
            )
        if status != host.status:  # the intent, durable before the BMC is asked (DESIGN rule 1)
            host = host.model_copy(deep=True)
            host.status = status.model_copy(deep=True)
            host = await self.ctx.durable("host.before-fence", host)
        try:
            state = await self._power_off(host, settings.get_float("host.fencing.timeout_s"))
        except BmcError as exc:
            return host, self._retry(host, status, now, attempts, exc.reason, str(exc))
        if state is not PowerState.OFF:
            why = f"the BMC accepted ForceOff but reports the host {state.value}"
            return host, self._retry(host, status, now, attempts, "PowerOffNotConfirmed", why)
        status.fence = status.fence.model_copy(
            update={
                "phase": FencePhase.FENCED,
                "confirmed_at": now,
                "reason": "Fenced",
                "message": f"the BMC confirmed the host Off after {attempts} attempt(s)",
            }
        )
        status.connection = HostConnection.DOWN
        self.ctx.event(
            host,
            "Fenced",
            "the BMC confirmed the host powered off: its VMs are recovered; set spec.fenced to false "
            "to return it to service",
            warning=True,
        )

        def latch(current: Host) -> None:
            current.spec.fenced = True
            current.status = status.model_copy(deep=True)

        written = await self.ctx.durable(
            "host.fenced",
            Change(
                Host,
                host.metadata.name,
                latch,
                spec_because="the BMC confirmed the host off: the fence latches until an admin clears it",
            ),
        )
        return written, None

    async def _power_off(self, host: Host, timeout_s: float) -> PowerState:
        redfish = host.spec.fencing.redfish if host.spec.fencing else None
        assert redfish is not None and self.bmc_factory is not None
        secret = self.ctx.read(Secret, redfish.credentials_secret)
        if secret is None:
            raise _SecretMissing(
                f"secret {redfish.credentials_secret} (the BMC's credentials) does not exist"
            )
        try:
            secret = self.ctx.store.opened(secret)  # sealed at rest (store/sealing.py)
        except SecretsKeyError as error:
            raise _SecretUnreadable(str(error)) from None
        bmc = self.bmc_factory(host, secret, timeout_s)
        state = await bmc.power_state()
        if state is PowerState.OFF:
            return state
        await bmc.force_off()
        return await bmc.power_state()

    def _retry(
        self, host: Host, status: HostStatus, now: datetime, attempts: int, reason: str, message: str
    ) -> float:
        settings = self.ctx.settings
        delay = start_retry_delay(
            attempts,
            settings.get_float("host.fencing.retry_base_s"),
            settings.get_float("host.fencing.retry_cap_s"),
        )
        assert status.fence is not None
        status.fence = status.fence.model_copy(
            update={
                "phase": FencePhase.RETRYING,
                "reason": reason,
                "message": f"{message}; the VMs wait; next attempt in {delay:.1f}s",
                "next_attempt_at": now + timedelta(seconds=delay),
            }
        )
        self.ctx.event(host, "FenceFailed", f"attempt {attempts}: {message}", warning=True)
        log.warning("fencing %s failed (attempt %d): %s", host.metadata.name, attempts, message)
        return delay


class _SecretMissing(BmcError):
    reason = "SecretNotFound"


class _SecretUnreadable(BmcError):
    reason = "SecretUnreadable"
