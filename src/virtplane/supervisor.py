"""``serve --workers N``: N API processes on one listening socket, and with ``--role all`` one
controllers' process, started and watched by the serve command.

The serve command binds the sockets, brings the store to this release and makes the admin
token (``server.prepare``), then forks: each child opens the store again and builds its own
part (``server.serve_role``). Forking after binding gives every API process the same listening
socket, and the kernel hands each new connection to one of them. The parent starts no thread
and keeps no connection to the store open before it forks, so a child inherits nothing half
done; it forks again to replace a child that died (not at once when it keeps dying young).

Signals are blocked in the parent and taken one at a time with ``sigtimedwait``: no handler
runs between two statements of the loop. SIGTERM or SIGINT stops every child with SIGTERM
(each ends its watches and hands its lease over, as a single server does), then SIGKILL after
``STOP_GRACE_S``; SIGHUP goes on to the API processes (a renewed TLS certificate). A serve
command killed outright takes its children with it (``die_with``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from virtplane.banner import announce
from virtplane.bootstrap import Role
from virtplane.server import ServeOptions, prepare, serve_role
from virtplane.tls import ServerTls

log = logging.getLogger("virtplane.supervisor")

SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
RESTART_FIRST_S = 0.5
"""A child that died is started again after this; after each quick death (it lived less than
``SETTLED_S``) twice as long, up to ``RESTART_MAX_S``."""
RESTART_MAX_S = 30.0
SETTLED_S = 10.0
STOP_GRACE_S = 25.0
"""SIGTERM to SIGKILL: within systemd's TimeoutStopSec=30s."""


@dataclass
class Child:
    role: Role
    pid: int | None = None
    started: float = 0.0
    quick_deaths: int = 0
    start_at: float = 0.0
    """When to start it (again), while ``pid`` is None."""


def supervise(
    options: ServeOptions, sock: socket.socket, health: socket.socket | None, tls: ServerTls | None
) -> None:
    """Run the children until SIGTERM or SIGINT; see the module docstring."""
    store, token, db_url = prepare(options)
    store.close()  # no connection crosses the fork
    announce(options, token, db_url, tls)
    sockets: dict[Role, socket.socket] = {"api": sock}
    if health is not None:
        sockets["controllers"] = health
    children = [Child("api") for _ in range(options.workers)]
    if health is not None:
        children.append(Child("controllers"))

    def run(role: Role) -> None:
        for other, kept in sockets.items():
            if other != role:
                kept.close()  # the controllers' process does not accept API connections
        serve_role(options, role, sockets[role], tls)

    Supervisor(children, lambda child: fork(lambda: run(child.role))).run()


class Supervisor:
    def __init__(self, children: list[Child], start: Callable[[Child], int]) -> None:
        self.children = children
        self._start = start

    def run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            self._loop()
        finally:
            self._stop()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            for child in self.children:
                if child.pid is None and child.start_at <= now:
                    child.pid, child.started = self._start(child), now
                    log.info("started the %s process %d", child.role, child.pid)
            waiting = [c.start_at - now for c in self.children if c.pid is None]
            received = signal.sigtimedwait(SIGNALS, max(min(waiting, default=1.0), 0.01))
            if received is None:
                continue
            if received.si_signo in (signal.SIGTERM, signal.SIGINT):
                log.info("stopping the %d processes", sum(c.pid is not None for c in self.children))
                return
            if received.si_signo == signal.SIGHUP:
                self._signal(signal.SIGHUP, "api")
            self._reap()

    def _reap(self) -> None:
        """Note every child that ended, and when to start it again."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = next((c for c in self.children if c.pid == pid), None)
            if child is None:
                continue
            now = time.monotonic()
            lived = now - child.started
            child.quick_deaths = child.quick_deaths + 1 if lived < SETTLED_S else 0
            delay = min(RESTART_FIRST_S * 2 ** max(child.quick_deaths - 1, 0), RESTART_MAX_S)
            child.pid, child.start_at = None, now + delay
            log.warning(
                "the %s process %d ended (%s) after %.1f s; starting another in %.1f s",
                child.role,
                pid,
                _status(status),
                lived,
                delay,
            )

    def _signal(self, signum: int, role: Role | None = None) -> None:
        for child in self.children:
            if child.pid is not None and role in (None, child.role):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    def _stop(self) -> None:
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while any(c.pid is not None for c in self.children):
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("processes still running after %.0f s: SIGKILL", STOP_GRACE_S)
                self._signal(signal.SIGKILL)
                deadline = time.monotonic() + STOP_GRACE_S
            signal.sigtimedwait({signal.SIGCHLD}, max(left, 0.01))
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    break
                for child in self.children:
                    if child.pid == pid:
                        child.pid = None


def fork(run: Callable[[], None]) -> int:
    """``run`` in a child process; its pid. The child never returns here: it exits."""
    if threading.active_count() > 1:  # a thread's locks would be copied held
        log.warning("forking with %d threads running", threading.active_count())
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        die_with(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        run()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        log.exception("the process failed")
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return 0  # not reached: the child has exited


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies: a serve command killed outright (SIGKILL, the
    OOM killer) takes its processes with it, as a single server's death would, instead of leaving
    them serving the port and holding the data directory's lock with no one to stop them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG): %s", os.strerror(ctypes.get_errno()))
    if os.getppid() != parent:  # it died before the prctl: nobody would tell us
        os._exit(1)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit status {os.waitstatus_to_exitcode(status)}"
