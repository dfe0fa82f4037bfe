"""``virtplane serve``: the store, the controllers, the API and the dashboard, in one process by
default; ``--role`` runs the API or the controllers alone, ``--workers`` several API processes
(``virtplane.supervisor``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from virtplane.api.limits import Limiter, RequestLimits
from virtplane.api.routes.login import Logins
from virtplane.api.watch import Streams
from virtplane.banner import ADMIN_TOKEN_FILE, announce
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions, Role
from virtplane.domain.resources import Host
from virtplane.drivers.base import HypervisorDriver
from virtplane.http_limits import ConnectionLimits, limited_protocol
from virtplane.identity.config import IdentitySettings
from virtplane.logs import configure as configure_logging
from virtplane.runtime.datadir import DataDirBusy, DataDirLock
from virtplane.runtime.private import create_private, narrow, private_dir, private_umask, write_private
from virtplane.runtime.retention import vacuum_once_at_start
from virtplane.store.errors import AlreadyExists
from virtplane.store.sealing import Keyring, SecretsKeyError
from virtplane.store.settings import Settings
from virtplane.store.store import Store, sqlite_url
from virtplane.store.upgrade import NewerData, UpgradeFailed
from virtplane.tls import ServerTls, TlsConfigError, is_loopback

if TYPE_CHECKING:
    from virtplane.drivers.sim import SimCloud

log = logging.getLogger("virtplane.server")

DEFAULT_PORT = 8470
DEFAULT_HEALTH_PORT = 8471
"""The controllers' process answers /healthz and /metrics on 127.0.0.1 at this port."""
OTHER_WRITERS_POLL_S = 0.05
"""Split roles: how often a process looks for the others' commits (``runtime.other_writers``)."""
SIM_DEFAULT_VCPUS = 32
SIM_DEFAULT_MEMORY_MIB = 131072
GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (CPython's default: 700).
A reconcile's objects live across a few awaits; at 700 many outlive a collection, are
promoted, and bring on full collections of the whole cache (0.2 s each with 20,000
objects): a sixth of bench row 3's time, against 1 % at 10,000 (docs/benchmarks.md)."""


@dataclass
class ServeOptions:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    db_url: str | None = None
    demo: bool = False
    log_level: str = "info"
    log_format: str = "text"
    sim_boot_seconds: float = 1.5
    sim_shutdown_seconds: float = 0.5
    # the simulator's migration link (bench/ sets an instantaneous one); defaults as SimCloud's
    sim_link_mib_s: float = 1000.0
    sim_migration_tick_s: float = 0.05
    sim_bridges: tuple[str, ...] | None = None
    """The Linux bridges each new simulated host has (None: the demo's with --demo, else none)."""
    lease_s: float = 15.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure_http: bool = False
    """Serve plain HTTP on a non-loopback address (a warning is logged): behind a TLS proxy."""
    secrets_key_file: Path | None = None
    """The key that seals Secrets' passwords (store/sealing.py); None: DATA_DIR/secrets.key."""
    connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    request_limits: RequestLimits = field(default_factory=RequestLimits)
    identity: IdentitySettings | None = None
    """Who may log in (``[identity]`` of the config file); None: tokens only."""
    role: Role = "all"
    """all: API and controllers; api: no controller, no election; controllers: no public listener."""
    workers: int = 1
    """API processes on the one listening socket; more than one: supervised, beside one
    controllers' process with role all (``virtplane.supervisor``)."""
    health_port: int = DEFAULT_HEALTH_PORT


class ApiServer(uvicorn.Server):
    """uvicorn's server that ends the API's watch streams first when it shuts down.

    uvicorn lets open responses finish before it shuts the application down, and a watch
    never finishes by itself: without this, shutdown would wait for every watcher.
    """

    def __init__(self, config: uvicorn.Config, streams: Streams, tls: ServerTls | None = None) -> None:
        super().__init__(config)
        self.streams = streams
        self.tls = tls

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.tls is not None:
            # SIGHUP: a renewed certificate for new connections; the listener stays open
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.tls.reload)
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.streams.close()
        await super().shutdown(sockets)


class ServeRefused(Exception):
    """The server cannot start (its directory is taken, its port is busy, its store is from a newer
    release or could not be upgraded); nothing was started. ``reason`` is the CLI's."""

    def __init__(self, message: str, reason: str = "ServeRefused") -> None:
        super().__init__(message)
        self.reason = reason


def admin_token(store: Store, data_dir: Path) -> tuple[str, bool]:
    """The admin token kept in DIR/admin.token, and whether it was made now (on the first start,
    or when the kept one no longer works): only a new token is printed."""
    path = data_dir / ADMIN_TOKEN_FILE
    if path.exists():
        narrow(path, 0o600)  # as an older release left it
        token = path.read_text().strip()
        if token and store.token_role(token) is not None:
            return token, False
    suffix = 0
    while True:
        name = "admin" if suffix == 0 else f"admin-{suffix}"
        try:
            token = store.create_token(name, "admin", description="made by serve; kept in " + str(path))
            break
        except AlreadyExists:
            suffix += 1
    write_private(path, token + "\n")
    return token, True


def sim_factory(
    sim: SimCloud, hosts: Callable[[], Iterable[Host]], bridges: tuple[str, ...] = ()
) -> Callable[[str], HypervisorDriver]:
    """Drivers for URIs; a sim:// host is created in the simulator the first time it is used,
    with the capacity its Host resource gives and ``bridges``. ``hosts`` is asked only then, so
    it may read a plane built with this factory (``lambda: plane.cache.hosts()``)."""

    def factory(uri: str) -> HypervisorDriver:
        if uri.startswith("sim://"):
            name = uri.removeprefix("sim://").split("?")[0]
            if sim.host_by_uri(uri) is None:
                host = next((h for h in hosts() if h.spec.uri == uri), None)
                capacity = host.spec.capacity if host is not None else None
                sim.add_host(
                    name,
                    capacity.vcpus if capacity else SIM_DEFAULT_VCPUS,
                    capacity.memory_mib if capacity else SIM_DEFAULT_MEMORY_MIB,
                    bridges,
                )
            driver: HypervisorDriver = sim.driver(uri)
            return driver
        from virtplane.drivers.libvirt import LibvirtDriver

        return LibvirtDriver(uri)

    return factory


@private_umask()  # the database, its WAL, backups, sim.db, consoles/: private as they are made
def build(
    options: ServeOptions, role: Role | None = None
) -> tuple[ControlPlane, tuple[str, bool] | None, str]:
    """The control plane for ``options``, the admin token (and whether it is new; None for the
    controllers' role, which serves no API) and the database URL."""
    store, token, db_url = prepare(options)
    return make_plane(store, options, role or options.role), token, db_url


def prepare(options: ServeOptions) -> tuple[Store, tuple[str, bool] | None, str]:
    """What happens once, before any process serves: the store brought to this release, the
    admin token, the demo's objects."""
    private_dir(options.data_dir)
    if options.db_url is None:
        create_private(options.data_dir / "virtplane.db")  # SQLite gives its WAL and SHM this mode
    db_url = options.db_url or sqlite_url(options.data_dir / "virtplane.db")
    store = Store(db_url)
    try:
        store.refuse_newer_data()  # before a key is made for a store this release will not open
        store.keyring = Keyring.load_or_create(options.secrets_key_file or options.data_dir / "secrets.key")
        store.migrate()  # with the key: data migration 3 seals the passwords older releases kept in clear
    except (NewerData, UpgradeFailed) as refused:  # the store is as it was: say so in one line
        store.close()
        raise ServeRefused(str(refused), reason=type(refused).__name__) from None
    except SecretsKeyError as error:
        store.close()
        raise ServeRefused(str(error)) from None
    vacuum_once_at_start(store, Settings(store))
    token = admin_token(store, options.data_dir) if options.role != "controllers" else None
    if options.demo:
        from virtplane.demo import seed

        seed(store)
    return store, token, db_url


def open_store(options: ServeOptions) -> Store:
    """The store ``prepare`` made ready, opened again in a process of its own."""
    store = Store(options.db_url or sqlite_url(options.data_dir / "virtplane.db"))
    store.keyring = Keyring.load_or_create(options.secrets_key_file or options.data_dir / "secrets.key")
    return store


@private_umask()
def make_plane(store: Store, options: ServeOptions, role: Role) -> ControlPlane:
    """The control plane of one process. The simulator lives with the controllers: its world is
    in memory (journaled to sim.db), so an API process has none (its fault routes say so)."""
    from virtplane.drivers.sim import SimCloud

    sim: SimCloud | None = None
    bridges = options.sim_bridges or ()
    if role != "api":
        # The simulated hypervisor keeps its state beside the store, so that, like real hosts,
        # it outlives a crash of the control plane.
        create_private(options.data_dir / "sim.db")
        sim = SimCloud(
            boot_seconds=options.sim_boot_seconds,
            shutdown_seconds=options.sim_shutdown_seconds,
            link_mib_s=options.sim_link_mib_s,
            migration_tick_s=options.sim_migration_tick_s,
            state_path=options.data_dir / "sim.db",
        )
        if options.demo:
            from virtplane.demo import BRIDGES, guest_loads, stock_library

            stock_library(sim)
            guest_loads(sim, store)
            bridges = BRIDGES if options.sim_bridges is None else bridges
    plane: ControlPlane
    console_dir = options.data_dir / "consoles"
    console_dir.mkdir(exist_ok=True)
    plane = ControlPlane(
        store,
        sim=sim,
        driver_factory=sim_factory(sim, lambda: plane.cache.hosts(), bridges) if sim is not None else None,
        options=ControlPlaneOptions(
            console_dir=str(console_dir),
            lease_s=options.lease_s,
            renew_every_s=options.lease_s / 3,
            role=role,
            other_writers_poll_s=None if role == "all" else OTHER_WRITERS_POLL_S,
        ),
    )
    if role == "api" and options.role == "all":  # serve --workers: the simulator is next door
        plane.api_context.sim_url = f"http://127.0.0.1:{options.health_port}"
    return plane


def listen(host: str, port: int) -> socket.socket:
    """The bound, listening socket for the API, or ServeRefused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeRefused(f"cannot listen on {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ServeRefused(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def run_server(options: ServeOptions) -> None:
    """Serve until interrupted. In this order, so that a refusal starts nothing: take the data
    directory, bind the port, then build the store, the controllers and the app."""
    configure_logging(options.log_level, options.log_format)
    if options.role == "controllers" and options.workers != 1:
        raise ServeRefused(
            "--workers counts API processes, and --role controllers runs none: the controllers are "
            "one leader-elected process (run --role api --workers N beside it)"
        )
    tls = server_tls(options) if options.role != "controllers" else None
    locks = [DataDirLock(d) for d in store_directories(options)]
    try:
        with private_umask():  # the data directory and the lock file in it
            private_dir(options.data_dir)
            for lock in locks:
                try:
                    lock.acquire()
                except DataDirBusy as exc:
                    raise ServeRefused(str(exc)) from None
        if options.role == "controllers":  # no public listener: its health, on loopback
            sock = listen("127.0.0.1", options.health_port)
        else:
            sock = listen(options.host, options.port)
        if options.workers > 1:
            from virtplane.supervisor import supervise

            health = listen("127.0.0.1", options.health_port) if options.role == "all" else None
            supervise(options, sock, health, tls)
        else:
            _serve(options, sock, tls)
    finally:
        for lock in locks:
            lock.release()


def server_tls(options: ServeOptions) -> ServerTls | None:
    """The TLS context of ``--tls-cert``/``--tls-key``, or ServeRefused: plain HTTP only on
    loopback, unless ``--insecure-http`` says the operator means it."""
    if (options.tls_cert is None) != (options.tls_key is None):
        raise ServeRefused("--tls-cert and --tls-key go together: give both, or neither for plain HTTP")
    if options.tls_cert is not None and options.tls_key is not None:
        try:
            return ServerTls(options.tls_cert, options.tls_key)
        except TlsConfigError as error:
            raise ServeRefused(str(error)) from None
    if not is_loopback(options.host):
        if not options.insecure_http:
            raise ServeRefused(
                f"{options.host} is not a loopback address and no certificate was given: tokens would "
                "cross the network in clear. Give --tls-cert and --tls-key (docs/operator-guide.md, "
                "'TLS'), or --insecure-http if a TLS proxy in front of virtplane does it."
            )
        log.warning(
            "serving plain HTTP on %s (--insecure-http): tokens and passwords cross the network in "
            "clear unless a TLS proxy is in front",
            options.host,
        )
    return None


def store_directories(options: ServeOptions) -> list[Path]:
    """The directories one server must own: the data directory, and a SQLite store's own if elsewhere."""
    directories = [options.data_dir.resolve()]
    url = options.db_url
    if url is not None and url.startswith("sqlite:///") and url.removeprefix("sqlite:///"):
        parent = Path(url.removeprefix("sqlite:///").split("?")[0]).resolve().parent
        if parent not in directories:
            directories.append(parent)
    return directories


def _serve(options: ServeOptions, sock: socket.socket, tls: ServerTls | None = None) -> None:
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    plane, token, db_url = build(options)
    announce(options, token, db_url, tls)
    run_app(plane, options, sock, tls)


def serve_role(options: ServeOptions, role: Role, sock: socket.socket, tls: ServerTls | None) -> None:
    """One process under ``supervise``: the store ``prepare`` made ready, this role's part of it."""
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    run_app(make_plane(open_store(options), options, role), options, sock, tls if role == "api" else None)


def run_app(plane: ControlPlane, options: ServeOptions, sock: socket.socket, tls: ServerTls | None) -> None:
    """uvicorn on ``sock`` until SIGTERM: the API, or (the controllers' role) /healthz and /metrics."""
    app = plane.app(health_only=plane.options.role == "controllers")
    app.state.limiter = Limiter(options.request_limits)
    if options.identity is not None:
        app.state.logins = Logins.of(options.identity)
    limits = options.connection_limits
    config = uvicorn.Config(
        app,
        # uvicorn's production pair, both dependencies: libuv's loop and a parser in C. In one
        # process the API, the controllers and the change feed share this one loop, so its own
        # work is on every path (docs/decisions.md, "Processes"). The parser's protocol is ours:
        # it bounds what a client may cost before the app sees a request (virtplane.http_limits).
        loop="uvloop",
        http=limited_protocol(limits),
        timeout_keep_alive=limits.idle_timeout_s,
        log_level=options.log_level.lower(),
        log_config=None,  # keep our handlers (text or JSON) for uvicorn's loggers too
        # our one context, which SIGHUP reloads in place (ServerTls)
        ssl_context_factory=(lambda _config, _default: tls.context) if tls is not None else None,
    )
    ApiServer(config, plane.api_context.streams, tls).run(sockets=[sock])
