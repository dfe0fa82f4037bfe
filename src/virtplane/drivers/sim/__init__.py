"""The simulated hypervisor: a real ``HypervisorDriver`` for demos, fault injection and big fleets.

Build a world explicitly and take one driver (connection) per host::

    cloud = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01)
    uri = cloud.add_host("h1", vcpus=16, memory_mib=65536)    # "sim://h1"
    driver = cloud.driver(uri)
    await driver.connect()

Timers run on the asyncio loop that calls the driver; a steady domain has no
timer, so 500 hosts and 10,000 domains cost a few dicts.

Domain states and what the driver reports
-----------------------------------------
- ``ensure_defined``: a new domain is SHUTOFF (DEFINED event). Redefining a live domain
  changes only the stored definition; the live config stays until the next start
  (DEFINED event with detail "updated" when it changed).
- ``start``: SHUTOFF → STARTING → after ``boot_seconds`` RUNNING (STARTED events with
  detail "booting", then "booted"); with no boot time RUNNING when it returns, as libvirt's
  domain is. A no-op when live; TransientError while SHUTTING_DOWN.
- ``shutdown``: STARTING/RUNNING/MIGRATING → SHUTTING_DOWN → after ``shutdown_seconds``
  SHUTOFF (STOPPED event; none when it begins, the caller asked for it). A no-op when off,
  shutting down or PAUSED: a paused guest ignores ACPI, so the caller's grace period runs
  out and it destroys the domain, as with libvirt.
- ``destroy``: live → SHUTOFF at once (STOPPED); a no-op when off or missing.
- ``pause``/``resume``: RUNNING ⇄ PAUSED (PAUSED/RESUMED); TransientError during a
  transition or migration, PermanentError when off.
- ``undefine``: UNDEFINED event; PermanentError when live; a no-op when missing.
- ``restore_memory``: defines the domain and makes it RUNNING at once with the saved
  memory marker (STARTED, detail "restored ..."); armed fail-start faults do not apply.

The driver cannot know whether the control plane acted for a user or for the
system, so shutdown and destroy report ``ExitReason.STOPPED_BY_SYSTEM``; the
controllers translate. ``DomainInfo.exit_reason`` is the reason of the last stop
while the domain is off and ``None`` while it is live. The ``CRASHED`` state is
never used: a crashed domain is SHUTOFF with exit reason CRASH, like libvirt's
shutoff/crashed reason.

Events go to the sink of the host's driver, synchronously on the loop thread, and
only while that driver is connected.

Capacity is the host's memory, as on a real hypervisor: the memory of live domains
plus incoming migrations is checked on start, restore and migration: ``PermanentError``
when the domain could never fit the host, ``TransientError`` when the host is full
right now (so the control plane's start retry keeps going). vCPUs are counted but
never refused (a real host runs more vCPUs than it has cores, only slower); how many
it takes is the control plane's allocation ratio. Pools follow the same rule.

Faults (``SimCloud.inject(host, kind, domain=None, count=1)``)
--------------------------------------------------------------
- ``guest-shutdown``: the guest powers off now → SHUTOFF, GUEST_SHUTDOWN, STOPPED event.
- ``guest-reset``: RESET event (reason GUEST_RESET), STARTING for boot_seconds, RUNNING again.
- ``crash``: SHUTOFF with CRASH, CRASHED event.
- ``fail-start``: the next ``count`` starts of ``domain`` (any domain of the host when None)
  go STARTING, then die after half the boot time: SHUTOFF with START_FAILED, CRASHED event.
- ``fail-migration``: the next ``count`` outgoing migrations of ``domain`` (or of any domain of
  the host) fail half way: job FAILED, the domain keeps running on the source.
- ``stall-migration``: the next ``count`` migrations stop making progress half way until aborted.
- ``host-down``: every call raises HostUnreachable; migrations to or from the host fail;
  live domains die. HOST_DOWN event (domain ""). After ``host-up`` (HOST_UP event) they are
  SHUTOFF with exit reason HOST_FAILURE, and a STOPPED event with that reason is sent for each.
- ``disconnect`` / ``reconnect``: calls raise HostUnreachable while domains keep running;
  events are lost while disconnected (there is no connection to carry them), and no host
  event is sent, since the host did not fail. Calls work again after ``reconnect``.

Guest faults on a domain that is not live (or paused) raise ``SimFaultError``.
``fault_log`` lists every injected fault.

Consoles
--------
``open_console`` attaches to a live domain's line console (``_console``): a banner and a
prompt, the typed bytes echoed, and answers to ``hostname``, ``uname``, ``whoami``, ``echo``
and ``help`` at the end of each line. It ends (``read`` returns b"") when the domain's live
instance does (stop, crash, host down, migration away) or the connection is lost
(``disconnect``); one session per domain (``ConsoleBusy``); NotRunning when off. Sessions
are connections: a restart keeps none.

Storage
-------
Volume paths are ``sim://POOL/VOLUME``; ``write_volume``/``read_volume`` set and read
content so tests can prove snapshot and revert. Deleting or reverting a volume a live
domain uses raises TransientError. Block-migrated disks are written to the target's
local pool of the same name (which the target must have ensured); the source keeps
its copy, as libvirt does, for the control plane to delete.

Backups
-------
As libvirt's push-mode jobs with checkpoints (``_backups``): a job copies the disks' size
(full) or what the guest wrote since the checkpoint (incremental: changed content, and the
guest's ``disk_write_mib_s``) at ``backup_mib_s``, one per domain at a time, into volumes of
the target pool; checkpoints stay with the domain on its host (across stop and start, not
across a migration until redefined, not past undefine). Migrating a domain whose job runs is
refused (TransientError). Jobs and checkpoints are in the state file.

Live migration
--------------
Pre-copy (see ``_precopy``): the source's domain is MIGRATING while the job runs.
On success it is gone from the source (MIGRATED event there) and RUNNING (or PAUSED
if it was) on the target (DEFINED and STARTED events there). A target that is down,
full, or lacks the local pool gives a FAILED job at once (``migrate`` still returns);
a bad request (unknown domain or target, domain not running) raises. Disks the
target would not see (a local disk that is not copied, a shared pool the target has
not ensured) fail the job at once too; paths that are not simulator volumes are
trusted. Failed and aborted jobs send MIGRATION_FAILED on the source. The last job of a domain stays
queryable (on source and target) until its next migration (across a restart, see below).
``SimCloud.migration_record()`` lists every start and end in order, so tests can check
concurrency limits at every instant.

Restarts (``SimCloud(..., state_path=PATH)``)
---------------------------------------------
Real hypervisors keep running while the control plane crashes. With a state file
(SQLite, WAL) the world does too: every change is committed before the driver call,
``SimCloud`` method or timer callback that made it returns, so a SIGKILL right after
loses nothing; only the rows of what changed are written (one domain row for a start,
whatever the fleet's size). A ``SimCloud`` built on an existing file loads hosts
(capacity, down, disconnected), domains (definition, live config, state, exit reason,
memory marker), pools, volumes with content, volume snapshots, saved memory, armed
faults with their counts and dirty rates, checkpoints and backup jobs (a job's progress is
read from the clock, so it went on while nobody ran). Time passes while no process runs: boots and
shutdowns store their wall-clock end (``clock``), so on load a STARTING domain whose
boot time is up is RUNNING, a SHUTTING_DOWN one is SHUTOFF (STOPPED_BY_SYSTEM), and a
start made to fail is SHUTOFF (START_FAILED) once its failure time is up; one whose time
is not up resumes for the time left on the first driver call or ``inject`` inside a
running loop (or ``await cloud.resume()``), with the usual events. Nothing is sent for
what finished while nobody ran: no connection was open.

A migration in flight goes on without the process that started it, as libvirt carries
a migration on without its client. Every tick stores the job (progress, disks to copy,
injected fault, room held on the target) with the wall-clock time of the tick; on load
the job advances through the time since, tick by tick (one tick per ``migration_tick_s``
of wall time, each worth ``migration_tick_s * time_scale`` simulated seconds, as in a
running process), without events, and is then either switched over (the domain RUNNING,
or PAUSED, on the target and gone from the source, its disks landed, as a completed
migration leaves it), FAILED at an injected fault, stalled, or running: then it resumes
with its timer like a boot. ``migration_job`` on
the source (or the target) returns it, ``abort_migration`` aborts it, and its room on
the target stays held. A completed job is not kept across a restart, nor one that
completed while nobody ran: as with libvirt, no job is left once the source domain is
gone (the control plane reads the outcome from the target's domain); a failed or aborted
job stays queryable until the domain's next migration. A migration whose source or
target is down on load fails, as when a host goes down. ``fault_log``,
``migration_record()`` and the timing arguments of the constructor are not stored (pass the same ones again: they set how far
a migration got while nobody ran). ``close()`` commits and closes the file; it is
optional. Without ``state_path`` nothing is written.

This section is the one description of what a restart keeps. How: the persisted state
lives only in records that mark their changes (``_changes``), and the state file writes
the marked rows at the end of each entry point (``_persist``);
``tests/drivers/test_sim_reload.py`` reloads the file after every step of random work.
"""

from ._cloud import SimCloud
from ._driver import SIM_CAPABILITIES, SimDriver
from ._guest import SimGuest
from ._model import FaultKind, FaultRecord, MigrationTransition, SimFaultError, SimHostState, SimState
from ._precopy import CONVERGENCE_MIB
from ._usage import SimLoad

__all__ = [
    "CONVERGENCE_MIB",
    "SIM_CAPABILITIES",
    "FaultKind",
    "FaultRecord",
    "MigrationTransition",
    "SimCloud",
    "SimDriver",
    "SimFaultError",
    "SimGuest",
    "SimHostState",
    "SimLoad",
    "SimState",
]
