#!/usr/bin/env python3
"""Run a command as a child subreaper, so exited QEMU processes are reaped at once.

libvirtd daemonises QEMU; when QEMU exits, its parent is whoever is the nearest
subreaper. In a sandbox whose PID 1 reaps slowly that makes ``destroy()`` take
seconds. Signals to this process are passed on to the command.
usage: subreaper.py COMMAND [ARGS...]
"""

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36


def main() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("subreaper: prctl failed", file=sys.stderr)
    command_pid = os.fork()
    if command_pid == 0:
        os.execvp(sys.argv[1], sys.argv[1:])
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda received, _frame: os.kill(command_pid, received))
    exit_code = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return exit_code
        except InterruptedError:
            continue
        if pid == command_pid:
            exit_code = os.waitstatus_to_exitcode(status)
            # Keep reaping orphans (QEMU) until every descendant is gone.


if __name__ == "__main__":
    sys.exit(main())
