"""A libvirt daemon that can be stopped (SIGSTOP) while connections to it are open: a wrapper
around a real test-driver connection whose opens and calls block while it is stopped, as a
stopped daemon's do, and which records every close with the calls then in the connection
(libvirt frees a closed connection, and a call still in it crashes the process when it
returns, so that number must be 0). It can also be cut off from the control plane (a network
partition): opens and calls fail at once while its domains keep running."""

from __future__ import annotations

import threading
from typing import Any

from tests.conftest import libvirt_or_skip

libvirt = libvirt_or_skip()

LOCAL = frozenset({"close", "registerCloseCallback", "unregisterCloseCallback", "setKeepAlive"})


class StoppableDaemon:
    def __init__(self, uri: str = "test:///default") -> None:
        self.uri = uri
        self.running = threading.Event()
        self.running.set()
        self.lock = threading.Lock()
        self.in_calls = 0  # calls waiting in a stopped daemon, over all connections
        self.closes: list[int] = []  # for each close: the calls then in that connection
        self.connections: list[HeldConnection] = []
        self.partitioned = False
        self.stops_at: str | None = None

    def cut_off(self) -> None:
        """The link to the host is down: every open and call fails at once."""
        self.partitioned = True

    def reconnect(self) -> None:
        self.partitioned = False

    def stop(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def stop_at(self, method: str) -> None:
        """Stop when a call of ``method`` comes in, before answering it: a SIGSTOP that lands
        between two calls of one look at the host."""
        self.stops_at = method

    def open(self, _uri: str) -> Any:
        self._held(lambda: None)
        if self.partitioned:
            raise libvirt.libvirtError(f"unable to connect to {self.uri}: No route to host")
        self.connections.append(HeldConnection(libvirt.open(self.uri), self))
        return self.connections[-1]

    def _held(self, call: Any) -> Any:
        with self.lock:
            self.in_calls += 1
        try:
            self.running.wait()
            return call()
        finally:
            with self.lock:
                self.in_calls -= 1


class HeldConnection:
    def __init__(self, conn: Any, daemon: StoppableDaemon) -> None:
        self._conn = conn
        self._daemon = daemon
        self.in_calls = 0
        self.dead = False

    def cut(self) -> None:
        """What libvirt's keepalive does to a connection whose daemon stopped answering."""
        self.dead = True

    def isAlive(self) -> int:
        return 0 if self.dead or self._daemon.partitioned else 1

    def close(self) -> int:
        with self._daemon.lock:
            self._daemon.closes.append(self.in_calls)
        return int(self._conn.close())

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._conn, name)
        if name in LOCAL or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead or self._daemon.partitioned:  # fails at once, without asking the daemon
                self._answer(attribute)
            with self._daemon.lock:
                self.in_calls += 1
                if name == self._daemon.stops_at:
                    self._daemon.stop()
            try:
                return self._daemon._held(lambda: self._answer(attribute, *args, **kwargs))
            finally:
                with self._daemon.lock:
                    self.in_calls -= 1

        return call

    def _answer(self, attribute: Any, *args: Any, **kwargs: Any) -> Any:
        if self.dead or self._daemon.partitioned:
            raise libvirt.libvirtError("Cannot recv data: Connection reset by peer")
        return attribute(*args, **kwargs)
