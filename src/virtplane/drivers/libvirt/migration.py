"""Outgoing live migrations: one thread per migration running ``migrateToURI3``.

``migrateToURI3`` blocks until the migration ends, so it runs in its own thread
and ``migrate()`` returns at once. Progress is read from the domain's job
statistics while it runs; the outcome (completed, failed, aborted) is kept
until the next migration of the same domain so a controller that polls late
still sees it.

The migrations are peer-to-peer: the source daemon drives them, and goes on when
the client that asked dies (seen with libvirt 9.0: a client SIGKILLed at 17 % of
a migration, the daemon finished it and the guest kept running on the target).
So a migration this process did not start, or started before a restart, is read
from the domain's job on the source (``live_job``), and the target shows the
arriving domain as paused (reason "migration") and not yet persistent
(``is_incoming``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from virtplane.drivers.base import MigrationJob, MigrationPhase, MigrationRequest
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import parse_domain_xml

MIB = 1024 * 1024


def migration_parameters(
    request: MigrationRequest, domain_xml: str, *, migration_address: str | None
) -> tuple[dict[str, Any], int]:
    """``migrateToURI3`` parameters and flags for ``request``; the target's migration address is
    the request's (from its Host spec), else the driver's own ``migration_address``."""
    lv = _libvirt.load()
    params: dict[str, Any] = {}
    address = request.migration_address or migration_address
    if address:
        # Where the destination QEMU listens and the source connects (default: the destination's
        # hostname, which the source host may not resolve, or resolve to the wrong network).
        bare = address.strip("[]")
        params[lv.VIR_MIGRATE_PARAM_URI] = f"tcp://[{bare}]" if ":" in bare else f"tcp://{bare}"
        params[lv.VIR_MIGRATE_PARAM_LISTEN_ADDRESS] = bare
    if request.bandwidth_mib_s is not None:
        params[lv.VIR_MIGRATE_PARAM_BANDWIDTH] = int(request.bandwidth_mib_s)
    flags = (
        lv.VIR_MIGRATE_LIVE
        | lv.VIR_MIGRATE_PEER2PEER
        | lv.VIR_MIGRATE_PERSIST_DEST
        | lv.VIR_MIGRATE_UNDEFINE_SOURCE
        | lv.VIR_MIGRATE_ABORT_ON_ERROR
        # libvirt only trusts cluster filesystems as shared; the control plane knows which of our
        # pools every host sees (DiskAttachment.shared) and copies all the others.
        | lv.VIR_MIGRATE_UNSAFE
    )
    if request.auto_converge:
        flags |= lv.VIR_MIGRATE_AUTO_CONVERGE
    if request.post_copy:
        # only allows the switch: it happens when start_post_copy asks (the policy's bound)
        flags |= lv.VIR_MIGRATE_POSTCOPY
    if request.copy_disks:
        wanted = set(request.copy_disks)
        disks = parse_domain_xml(domain_xml).disks
        devs = [dev for dev, path in disks if path in wanted]
        missing = wanted - {path for _dev, path in disks}
        if missing:
            raise PermanentError(f"disks to copy are not attached to {request.domain}: {sorted(missing)}")
        params[lv.VIR_MIGRATE_PARAM_MIGRATE_DISKS] = devs
        flags |= lv.VIR_MIGRATE_NON_SHARED_DISK
    return params, flags


@dataclass
class _Migration:
    job: MigrationJob
    thread: threading.Thread | None = None
    abort_requested: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class MigrationTracker:
    """The outgoing migrations of one driver, by domain name."""

    def __init__(self, on_failed: Callable[[MigrationJob], None]) -> None:
        self._migrations: dict[str, _Migration] = {}
        self._lock = threading.Lock()
        self._on_failed = on_failed

    def running(self, name: str) -> bool:
        with self._lock:
            entry = self._migrations.get(name)
        return entry is not None and not entry.job.finished

    def begin(self, dom: LibvirtDomain, request: MigrationRequest, *, migration_address: str | None) -> None:
        """Start migrating ``dom`` as ``request`` asks; returns at once."""
        if not dom.is_active():
            raise PermanentError(f"domain {request.domain} is not running; only live migration is supported")
        params, flags = migration_parameters(request, dom.xml(), migration_address=migration_address)
        if request.max_downtime_ms is not None:
            # QEMU keeps the limit as a migration parameter of the domain: set before the start
            dom.set_max_downtime(request.max_downtime_ms)
        self._start(dom, request, params, flags)

    def current(self, name: str, dom: LibvirtDomain | None) -> MigrationJob | None:
        """The outgoing migration of ``name`` (``dom``, when it is still here): ours, or one
        started by an earlier process or another replica that the hypervisor still runs."""
        if self.running(name):
            return self.job(name, dom)
        lv = _libvirt.load()
        try:
            live = live_job(dom) if dom is not None and dom.is_active() else None
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                raise
            live = None  # gone since it was found: a finished migration undefines the source
        return live or self.job(name, None)

    def abort(self, dom: LibvirtDomain) -> None:
        """Abort the outgoing migration of ``dom``, ours or not; nothing when none runs."""
        lv = _libvirt.load()
        ours = self.request_abort(dom.name)
        if not ours and (not dom.is_active() or live_job(dom) is None):
            return
        try:
            dom.abort_job()
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) != lv.VIR_ERR_OPERATION_INVALID:
                raise  # "no job is active": it finished just now

    def start_post_copy(self, dom: LibvirtDomain) -> None:
        """Switch the outgoing migration of ``dom`` to post-copy; nothing when it already is."""
        lv = _libvirt.load()
        state, reason = dom.state()
        if state == lv.VIR_DOMAIN_PAUSED and reason == lv.VIR_DOMAIN_PAUSED_POSTCOPY:
            return
        try:
            dom.start_post_copy()
        except lv.libvirtError as exc:
            raise PermanentError(f"cannot switch {dom.name} to post-copy: {exc}") from exc

    def _start(
        self, dom: LibvirtDomain, request: MigrationRequest, params: dict[str, Any], flags: int
    ) -> None:
        with self._lock:
            entry = self._migrations.get(request.domain)
            if entry is not None and not entry.job.finished:
                return  # already migrating: migrate() is idempotent
            entry = _Migration(MigrationJob(request.domain, request.target_uri, MigrationPhase.RUNNING))
            self._migrations[request.domain] = entry
        entry.thread = threading.Thread(
            target=self._run,
            args=(entry, dom, request.target_uri, params, flags),
            name=f"migrate {request.domain}",
            daemon=True,
        )
        entry.thread.start()

    def _run(
        self, entry: _Migration, dom: LibvirtDomain, target_uri: str, params: dict[str, Any], flags: int
    ) -> None:
        lv = _libvirt.load()
        try:
            dom.migrate(target_uri, params, flags)
        except lv.libvirtError as exc:
            aborted = entry.abort_requested or _libvirt.error_code(exc) == lv.VIR_ERR_OPERATION_ABORTED
            phase = MigrationPhase.ABORTED if aborted else MigrationPhase.FAILED
            with entry.lock:
                entry.job = replace(entry.job, phase=phase, error=str(exc))
            self._on_failed(entry.job)
            return
        with entry.lock:
            entry.job = replace(entry.job, phase=MigrationPhase.COMPLETED, data_remaining_mib=0.0)

    def job(self, name: str, dom: LibvirtDomain | None) -> MigrationJob | None:
        """The migration's state, with fresh job statistics while it runs."""
        with self._lock:
            entry = self._migrations.get(name)
        if entry is None:
            return None
        if not entry.job.finished and dom is not None:
            stats = _job_stats(dom)
            if stats is not None:
                stats["post_copy"] = in_post_copy(dom)
                with entry.lock:
                    if not entry.job.finished:
                        entry.job = replace(entry.job, **stats)
        with entry.lock:
            return entry.job

    def request_abort(self, name: str) -> bool:
        """Mark the migration as aborted by us; False when none is running."""
        with self._lock:
            entry = self._migrations.get(name)
        if entry is None or entry.job.finished:
            return False
        entry.abort_requested = True
        return True

    def wait(self, name: str, timeout: float | None = None) -> None:
        with self._lock:
            entry = self._migrations.get(name)
        if entry is not None and entry.thread is not None:
            entry.thread.join(timeout)


def live_job(dom: LibvirtDomain, target_uri: str = "") -> MigrationJob | None:
    """The outgoing migration the hypervisor is running for ``dom`` now, whoever started it."""
    lv = _libvirt.load()
    try:
        stats = dom.job_stats()
    except lv.libvirtError:
        return None  # no job, or a hypervisor (the test driver) without job statistics
    if stats.get("type", lv.VIR_DOMAIN_JOB_NONE) == lv.VIR_DOMAIN_JOB_NONE:
        return None
    if stats.get("operation") != lv.VIR_DOMAIN_JOB_OPERATION_MIGRATION_OUT:
        return None
    fields = _stats_fields(stats)
    return MigrationJob(dom.name, target_uri, MigrationPhase.RUNNING, post_copy=in_post_copy(dom), **fields)


def in_post_copy(dom: LibvirtDomain) -> bool:
    """The source side of a migration in post-copy: paused with reason post-copy."""
    lv = _libvirt.load()
    try:
        state, reason = dom.state()
    except lv.libvirtError:
        return False
    return bool(state == lv.VIR_DOMAIN_PAUSED and reason == lv.VIR_DOMAIN_PAUSED_POSTCOPY)


def is_incoming(dom: LibvirtDomain, state: int, reason: int) -> bool:
    """Whether ``dom`` is arriving here by live migration (paused for it, transient until it ends)."""
    lv = _libvirt.load()
    return (
        state == lv.VIR_DOMAIN_PAUSED and reason == lv.VIR_DOMAIN_PAUSED_MIGRATION and not dom.is_persistent()
    )


def _stats_fields(stats: dict[str, Any]) -> dict[str, Any]:
    return {
        "data_total_mib": stats.get("data_total", 0) / MIB,
        "data_processed_mib": stats.get("data_processed", 0) / MIB,
        "data_remaining_mib": stats.get("data_remaining", 0) / MIB,
        "iteration": int(stats.get("memory_iteration", 0)),
        "memory_remaining_mib": stats.get("memory_remaining", 0) / MIB,
        # QEMU counts dirtied pages per second
        "dirty_rate_mib_s": stats.get("memory_dirty_rate", 0) * stats.get("memory_page_size", 4096) / MIB,
        "throttle_pct": int(stats.get("auto_converge_throttle", 0)),
    }


def _job_stats(dom: LibvirtDomain) -> dict[str, Any] | None:
    lv = _libvirt.load()
    try:
        stats = dom.job_stats()
    except lv.libvirtError:
        return None  # the job just ended, or the domain left
    if stats.get("type", lv.VIR_DOMAIN_JOB_NONE) == lv.VIR_DOMAIN_JOB_NONE:
        return None
    return _stats_fields(stats)


__all__ = ["MigrationTracker", "is_incoming", "live_job", "migration_parameters"]
