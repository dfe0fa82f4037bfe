"""Host maintenance as the API asks for it: plan (dry run), ask or retry, show, cancel.

The service writes only the ``HostMaintenance``'s spec (a request bumps ``spec.request``,
a cancel sets ``spec.cancel``); the maintenance controller plans again and writes the
status before anything moves. So that a client sees at once what its request will do,
an answer to a request the controller has not taken up yet shows the status the request
starts from (``domain.maintenance_plan.restart_status``) with the plan computed now, from
the cache: the same read-only plan a dry run answers with.
"""

from __future__ import annotations

from typing import Any

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.maintenance import compute_plan, strategy_of
from virtplane.domain.errors import NotFound, Refused
from virtplane.domain.maintenance_plan import plan_items, restart_status
from virtplane.domain.progress import PlanAction
from virtplane.domain.resources import (
    Host,
    HostMaintenance,
    HostMaintenanceSpec,
    HostMaintenanceStatus,
    HostResourceState,
    MaintenancePhase,
    MaintenanceStrategy,
    Metadata,
)

__all__ = ["ACTIVE_PHASES", "MaintenanceService", "view"]

ACTIVE_PHASES = frozenset(
    {
        MaintenancePhase.DRAINING,
        MaintenancePhase.COMPLETED,
        MaintenancePhase.FAILED,
        MaintenancePhase.CANCELLING,
    }
)
"""A maintenance that holds its host: asking again is a no-op (or a retry, when it failed)."""


def _pending(m: HostMaintenance) -> bool:
    """A request the controller has not taken up yet (a cancel is never taken up that way)."""
    return m.status.observed_generation != m.metadata.generation and not m.spec.cancel


def _phase(m: HostMaintenance) -> MaintenancePhase:
    """The stored phase; a request not taken up yet counts as Draining already."""
    return MaintenancePhase.DRAINING if _pending(m) else m.status.phase


def view(maintenance: HostMaintenance, host: Host | None) -> dict[str, Any]:
    """The maintenance as the API shows it (the CLI reads ``plan.items`` and ``progress``)."""
    status = maintenance.status
    blocked = [i.vm for i in status.plan if i.action is PlanAction.BLOCKED]
    return {
        "host": maintenance.spec.host,
        "phase": status.phase.value,
        "host_state": host.status.resource_state.value if host else None,
        "strategy": (status.strategy or maintenance.spec.strategy or MaintenanceStrategy.ERROR).value,
        "requested_strategy": maintenance.spec.strategy.value if maintenance.spec.strategy else None,
        "dry_run": maintenance.spec.dry_run,
        "cancel": maintenance.spec.cancel,
        "return_vms": maintenance.spec.return_vms,
        "plan": {
            "feasible": not blocked,
            "items": [i.model_dump(mode="json") for i in status.plan],
        },
        "progress": {vm: p.model_dump(mode="json") for vm, p in sorted(status.progress.items())},
        "stopped_vms": list(status.stopped_vms),
        "migrated_vms": dict(status.migrated_vms),
        "blocking": list(status.blocking),
        "message": status.message,
        "started_at": status.started_at.isoformat() if status.started_at else None,
        "finished_at": status.finished_at.isoformat() if status.finished_at else None,
        "resource_version": maintenance.metadata.resource_version,
    }


class MaintenanceService:
    """Requests from the API: plan, start (or retry), show and cancel a host's maintenance."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    def _host(self, name: str) -> Host:
        host = self.ctx.read(Host, name)
        if host is None:
            raise NotFound("NotFound", f"host {name} does not exist")
        return host

    def _answer(
        self, maintenance: HostMaintenance, host: Host, strategy: MaintenanceStrategy
    ) -> dict[str, Any]:
        """The maintenance as stored; a request the controller has not taken up yet shows the
        status it starts from, with the plan computed now (nothing of this is written here)."""
        if not _pending(maintenance):
            return view(maintenance, host)
        plan = compute_plan(self.ctx, maintenance.spec.host, strategy)
        shown = maintenance.model_copy(deep=True)
        shown.status = restart_status(maintenance.status, plan, self.ctx.now())
        return view(shown, host)

    def request(
        self, host_name: str, strategy: MaintenanceStrategy | None, dry_run: bool, by: str
    ) -> dict[str, Any]:
        ctx = self.ctx
        host = self._host(host_name)
        state = host.status.resource_state
        if state is HostResourceState.DISABLED:
            raise Refused(
                "HostDisabled",
                f"host {host_name} is Disabled: maintenance starts from Enabled; "
                "enable it first (PATCH spec.enabled=true)",
            )
        current = ctx.store.find(HostMaintenance, host_name)
        phase = _phase(current) if current is not None else None
        if phase is MaintenancePhase.CANCELLING:
            raise Refused(
                "MaintenanceCancelling", f"the maintenance of {host_name} is being cancelled; ask again after"
            )
        effective = strategy_of(ctx, strategy)
        if dry_run:
            plan = compute_plan(ctx, host_name, effective)
            preview = HostMaintenance(
                metadata=Metadata(name=host_name),
                spec=HostMaintenanceSpec(host=host_name, strategy=strategy, dry_run=True),
                status=HostMaintenanceStatus(
                    phase=MaintenancePhase.PLANNED, strategy=effective, plan=plan_items(plan)
                ),
            )
            preview.status.blocking = [i.vm for i in plan.blocked]
            preview.status.message = "dry run: nothing was changed" + (
                "" if plan.feasible else f"; blocked: {', '.join(preview.status.blocking)}"
            )
            return view(preview, host)
        retry = state is HostResourceState.ERROR_IN_MAINTENANCE or phase is MaintenancePhase.FAILED
        if current is not None and phase in ACTIVE_PHASES and not retry:
            if strategy is not None and strategy != (current.spec.strategy or current.status.strategy):
                raise Refused(
                    "MaintenanceInProgress",
                    f"host {host_name} is in {state.value} with strategy "
                    f"{(current.status.strategy or effective).value}; cancel it to change the strategy",
                )
            return self._answer(current, host, effective)  # asking again while it runs is a no-op
        if current is None:
            written = ctx.store.create(
                HostMaintenance(
                    metadata=Metadata(name=host_name),
                    spec=HostMaintenanceSpec(host=host_name, strategy=strategy),
                )
            )
        else:

            def ask(m: HostMaintenance) -> None:
                m.spec.strategy = strategy
                m.spec.cancel = False
                m.spec.return_vms = None
                m.spec.dry_run = False
                m.spec.request += 1

            written = ctx.store.mutate(HostMaintenance, host_name, ask)
        ctx.cache.put(written)
        what = "retry" if retry else "request"
        ctx.event(("Host", host_name), "MaintenanceRequested", f"{what} by {by}, strategy {effective.value}")
        return self._answer(written, host, effective)

    def show(self, host_name: str) -> dict[str, Any]:
        host = self._host(host_name)
        current = self.ctx.store.find(HostMaintenance, host_name)
        if current is None:
            raise NotFound("NotInMaintenance", f"host {host_name} is not in maintenance")
        return view(current, host)

    def cancel(self, host_name: str, by: str, return_vms: bool | None = None) -> dict[str, Any]:
        """Cancel; ``return_vms`` (None: the setting decides) is fixed by the first cancel."""
        host = self._host(host_name)
        current = self.ctx.store.find(HostMaintenance, host_name)
        if current is None or _phase(current) is MaintenancePhase.CANCELLED:
            raise NotFound("NotInMaintenance", f"host {host_name} is not in maintenance")
        if current.spec.cancel:
            return view(current, host)

        def cancel(m: HostMaintenance) -> None:
            m.spec.cancel = True
            m.spec.return_vms = return_vms

        written = self.ctx.store.mutate(HostMaintenance, host_name, cancel)
        self.ctx.cache.put(written)
        said = "" if return_vms is None else f", return_vms={str(return_vms).lower()}"
        self.ctx.event(("Host", host_name), "MaintenanceCancelRequested", f"by {by}{said}")
        return view(written, host)
