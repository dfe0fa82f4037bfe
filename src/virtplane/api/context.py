"""What the API needs from the rest of the system, handed in by the composition root."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypedDict

from virtplane.api.watch import Streams, WatchOptions
from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Resource
from virtplane.store.settings import Settings
from virtplane.store.store import Store

if TYPE_CHECKING:  # the composition root hands them in; the API never builds one
    from virtplane.drivers.sim import SimCloud
    from virtplane.runtime.usage import UsageHistory
    from virtplane.services.console import ConsoleService
    from virtplane.services.display import DisplayService
    from virtplane.services.image_upload import ImageUploads
    from virtplane.services.maintenance import MaintenanceService
    from virtplane.services.placement import PlacementService
    from virtplane.services.rebalance import RebalanceService


class ControllersRole(TypedDict, total=False):
    """For /healthz: does this process reconcile (single, leader), or follow another replica?"""

    role: str
    replica: str | None
    leader: str | None


class Admission(Protocol):
    """Checks writes that need more than field validation (references, applicability)."""

    def on_create(self, obj: Resource) -> Resource: ...

    def on_update(self, current: Resource, new: Resource) -> Resource: ...

    def on_delete(self, current: Resource) -> None: ...

    def claims_of(self, obj: Resource) -> list[Claim]: ...


class AllowAll:
    def on_create(self, obj: Resource) -> Resource:
        return obj

    def on_update(self, current: Resource, new: Resource) -> Resource:
        return new

    def on_delete(self, current: Resource) -> None:
        return None

    def claims_of(self, obj: Resource) -> list[Claim]:
        return []


@dataclass
class ApiContext:
    store: Store
    settings: Settings
    admission: Admission = field(default_factory=AllowAll)
    sim: SimCloud | None = None
    """The simulator, when it runs in this process."""
    sim_url: str | None = None
    """Where the simulator's requests go when it runs in another process of this server (the
    controllers' loopback listener, under ``serve --workers``); None: nowhere."""
    maintenance: MaintenanceService | None = None
    placement: PlacementService | None = None
    """Migration targets (its verdicts), when wired."""
    consoles: ConsoleService | None = None
    images: ImageUploads | None = None
    """Uploads into image libraries, written to the hosts through their drivers."""
    displays: DisplayService | None = None
    """The VMs' screens (VNC and screenshots), when wired."""
    controllers: Callable[[], ControllersRole] = field(default=lambda: ControllersRole(role="none"))
    """Whether this process runs the controllers: role single, leader or follower (and who leads)."""
    catch_up: Callable[[], Awaitable[None]] | None = None
    """Brings the in-memory cache up to the store's current revision (on the event loop)."""
    written: Callable[[Resource], None] = lambda _: None
    """Takes an object a route has just written into the in-memory cache (on the event loop),
    as the controllers' writes are: its watchers wake now, and the change feed does not read
    it back from the store."""
    streams: Streams = field(default_factory=Streams)
    """Open watch streams; the server ends them before it shuts down."""
    watch: WatchOptions = field(default_factory=WatchOptions)
    usage: UsageHistory | None = None
    """The VMs' and hosts' collected use (in memory; filled where the collector runs)."""
    rebalance: RebalanceService | None = None
    """Each cluster's balance and rebalance plan (issue 37), when wired."""
