"""One libvirt connection that notices when its host goes away and comes back.

Libvirt's close callback tells us the connection died (the daemon closed it, or ended); a
failed call on a connection that is no longer alive does too. While the host is away ``connected`` is False, every call raises
HostUnreachable, and a background thread reopens the connection with
exponential backoff. ``on_down``/``on_up`` report the transitions (the driver
turns them into HOST_DOWN/HOST_UP events).

A connection is never closed while a call is in it: libvirt frees a closed connection
that another thread is still waiting in, and the waiting call crashes the process when the
daemon answers at last (a stopped daemon that resumes, or dies). So a call holds its
connection (``using``), and one closed or lost meanwhile is closed when its last call
returns; closing itself runs on a thread of its own, as libvirt's close waits for the daemon.
Libvirt's client keepalive is off by default (``keepalive_interval_s`` 0): libvirt 9.0's
client, when its keepalive closes a connection with several calls waiting in it, lets one
go and crashes in another when the daemon goes away later. A host that stops answering is
found by the host controller's probe time limit instead.

All methods here block; the driver runs them in its executor.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from virtplane.drivers.errors import HostUnreachable
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.events import ensure_event_loop

log = logging.getLogger(__name__)

Opener = Callable[[str], Any]


def _open_with_libvirt(uri: str) -> Any:
    return _libvirt.load().open(uri)


class LibvirtConnection:
    def __init__(
        self,
        uri: str,
        *,
        on_open: Callable[[Any], None],
        on_up: Callable[[], None],
        on_down: Callable[[str], None],
        opener: Opener | None = None,
        keepalive_interval_s: int = 0,
        keepalive_count: int = 0,
        reconnect_initial_s: float = 0.5,
        reconnect_max_s: float = 30.0,
    ) -> None:
        self.uri = uri
        self._on_open = on_open
        self._on_up = on_up
        self._on_down = on_down
        self._opener = opener or _open_with_libvirt
        self._keepalive = (keepalive_interval_s, keepalive_count)
        self._reconnect_initial_s = reconnect_initial_s
        self._reconnect_max_s = reconnect_max_s
        self._lock = threading.RLock()
        self._conn: Any = None
        self._closing = threading.Event()
        self._reconnector: threading.Thread | None = None
        self._calls: dict[int, int] = {}  # id(virConnect) -> calls in it now
        self._retired: dict[int, Any] = {}  # connections to close once their last call returns
        self.last_error = ""

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def get(self) -> Any:
        """The live virConnect; raises HostUnreachable while the host is away."""
        conn = self._conn
        if conn is None:
            raise HostUnreachable(f"{self.uri}: not connected ({self.last_error or 'never connected'})")
        return conn

    @contextlib.contextmanager
    def using(self) -> Iterator[Any]:
        """The live virConnect, held for one call: closing or losing it meanwhile closes it only
        once the call has returned. Raises HostUnreachable while the host is away."""
        with self._lock:
            conn = self.get()
            self._calls[id(conn)] = self._calls.get(id(conn), 0) + 1
        try:
            yield conn
        finally:
            with self._lock:
                left = self._calls.pop(id(conn)) - 1
                if left:
                    self._calls[id(conn)] = left
                retired = None if left else self._retired.pop(id(conn), None)
            if retired is not None:
                self._dispose_later(retired)

    def open(self) -> None:
        """Connect now; on failure raise HostUnreachable and keep trying in the background."""
        with self._lock:
            if self._conn is not None:
                return
            self._closing.clear()
        try:
            conn = self._dial()
        except HostUnreachable:
            with self._lock:
                self._start_reconnecting()
            raise
        if self._install(conn):
            self._on_up()
        elif self._conn is None:
            raise HostUnreachable(f"{self.uri}: closed while connecting")

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            conn, self._conn = self._conn, None
        reconnector = self._reconnector
        if reconnector is not None and reconnector is not threading.current_thread():
            # Between its waits it sees the close at once; in an open that a hung host never
            # answers it may stay for ever, and installs nothing when it comes back (_install).
            reconnector.join(timeout=1)
        if conn is not None:
            self._retire(conn)

    def is_alive(self) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            return bool(conn.isAlive())
        except Exception:
            return False

    def lost(self, why: str) -> None:
        """The connection is dead: report the host down once and start reconnecting."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None or self._closing.is_set():
                return
            self.last_error = why
            self._retire(conn)
            self._start_reconnecting()
        log.warning("libvirt connection to %s lost: %s", self.uri, why)
        self._on_down(why)

    # -- internals

    def _dial(self) -> Any:
        """A new connection, ready to use. Blocking, and for ever if the host accepts and never
        answers (libvirt's open has no timeout): so no lock is held while it runs, and a caller
        that must not wait bounds it (``runtime.hosts``)."""
        ensure_event_loop()  # keepalive and events need the loop before the connection opens
        try:
            conn = self._opener(self.uri)
        except Exception as exc:
            self.last_error = str(exc)
            raise HostUnreachable(f"{self.uri}: {exc}") from exc
        if conn is None:
            self.last_error = "open returned no connection"
            raise HostUnreachable(f"{self.uri}: {self.last_error}")
        try:
            interval, count = self._keepalive
            conn.setKeepAlive(interval, count)  # an interval of 0 turns it off
        except Exception:
            pass  # local drivers (test:///, qemu:///system over a unix socket opened in-process) lack it
        try:
            conn.registerCloseCallback(self._closed_by_libvirt, None)
            self._on_open(conn)
        except Exception as exc:
            self._dispose(conn)
            self.last_error = str(exc)
            raise HostUnreachable(f"{self.uri}: {exc}") from exc
        return conn

    def _install(self, conn: Any) -> bool:
        """Make ``conn`` the connection, unless closed meanwhile or another got there first."""
        with self._lock:
            if self._closing.is_set() or self._conn is not None:
                self._dispose_later(conn)
                return False
            self._conn = conn
            self.last_error = ""
            return True

    def _closed_by_libvirt(self, conn: Any, reason: int, _opaque: object) -> None:
        lv = _libvirt.load()
        if reason == lv.VIR_CONNECT_CLOSE_REASON_CLIENT:
            return  # we closed it ourselves
        names = {
            lv.VIR_CONNECT_CLOSE_REASON_ERROR: "I/O error",
            lv.VIR_CONNECT_CLOSE_REASON_EOF: "closed by the host",
            lv.VIR_CONNECT_CLOSE_REASON_KEEPALIVE: "keepalive timeout",
        }
        # Called on the event loop thread: never block it with a reconnect.
        if conn is self._conn:
            self.lost(names.get(reason, f"closed (reason {reason})"))

    def _start_reconnecting(self) -> None:
        if self._reconnector is not None and self._reconnector.is_alive():
            return
        self._reconnector = threading.Thread(
            target=self._reconnect_loop, name=f"libvirt-reconnect {self.uri}", daemon=True
        )
        self._reconnector.start()

    def _reconnect_loop(self) -> None:
        delay = self._reconnect_initial_s
        while not self._closing.wait(delay):
            if self._conn is not None:
                return
            try:
                conn = self._dial()
            except HostUnreachable as exc:
                log.debug("reconnect to %s failed: %s", self.uri, exc)
                delay = min(delay * 2, self._reconnect_max_s)
                continue
            if not self._install(conn):
                return
            log.info("libvirt connection to %s is back", self.uri)
            self._on_up()
            return

    def _retire(self, conn: Any) -> None:
        """Close ``conn``, which is no longer the connection, once no call is in it."""
        with self._lock:
            if self._calls.get(id(conn)):
                self._retired[id(conn)] = conn
                return
        self._dispose_later(conn)

    def _dispose_later(self, conn: Any) -> None:
        """Close ``conn`` on a thread of its own: libvirt's close asks the daemon, which may
        not answer (stopped, hung) for as long as it stays so."""
        threading.Thread(
            target=self._dispose, args=(conn,), name=f"libvirt-close {self.uri}", daemon=True
        ).start()

    @staticmethod
    def _dispose(conn: Any) -> None:
        # A dead connection may refuse a clean close; it is gone either way.
        with contextlib.suppress(Exception):
            conn.unregisterCloseCallback()
        with contextlib.suppress(Exception):
            conn.close()


__all__ = ["LibvirtConnection", "Opener"]
