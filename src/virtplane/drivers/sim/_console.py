"""The simulated guests' serial consoles: a line console per live domain (and their screens'
sessions, ``_display``, which end with the domain's instance the same way).

A console exists only while its domain has a live instance on the host: the host hangs
it up when the domain stops, crashes, dies with the host or leaves by migration, and the
session's ``read`` then returns b"". One session per domain at a time (``ConsoleBusy``),
as libvirt's console without FORCE. The guest behaves like a shell on a serial line: it
echoes what is typed (the terminal on the other end is raw), and at the end of a line it
answers a few commands (``COMMANDS``). Sessions are not persisted: a console is a
connection, and a restarted control plane has none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from virtplane.drivers.errors import ConsoleBusy

from ._display import SimScreenSession

BACKSPACES = frozenset(b"\x7f\x08")
INTERRUPT = 0x03  # Ctrl-C: drops the line, as a shell does
HELP = "commands: hostname, uname [-a], whoami, echo TEXT, help"


def _answer(line: str, vm_name: str) -> str:
    """What the simulated guest prints for one command line ("" for nothing)."""
    command, _, rest = line.strip().partition(" ")
    if not command:
        return ""
    if command == "hostname":
        return vm_name
    if command == "uname":
        return f"Linux {vm_name} 6.1.0-virtplane-sim x86_64" if rest.strip() == "-a" else "Linux"
    if command == "whoami":
        return "root"
    if command == "echo":
        return rest
    if command == "help":
        return HELP
    return f"-sh: {command}: not found ({HELP})"


class SimConsoleSession:
    """One attached console (a ``ConsoleStream``); made by ``SimConsoles.open``."""

    def __init__(self, vm_name: str, release: Callable[[SimConsoleSession], None]) -> None:
        self._vm_name = vm_name
        self._release = release
        self._output: asyncio.Queue[bytes] = asyncio.Queue()
        self._line = bytearray()
        self._last = 0
        self._ended = False
        self._say(
            f"\r\nvirtplane simulated guest {vm_name} (serial console; type 'help')\r\n\r\n{self._prompt}"
        )

    @property
    def _prompt(self) -> str:
        return f"root@{self._vm_name}:~# "

    def _say(self, text: str) -> None:
        self._output.put_nowait(text.encode("utf-8", "replace"))

    async def read(self) -> bytes:
        data = await self._output.get()
        if not data:
            self._output.put_nowait(b"")  # every later read sees the end too
        return data

    async def write(self, data: bytes) -> None:
        if self._ended:
            return
        echo = bytearray()
        for byte in data:
            if byte in b"\r\n":
                if byte == ord("\n") and self._last == ord("\r"):
                    self._last = byte
                    continue  # CR LF is one line end
                line = self._line.decode("utf-8", "replace")
                self._line.clear()
                answer = _answer(line, self._vm_name)
                echo += ("\r\n" + (answer + "\r\n" if answer else "") + self._prompt).encode()
            elif byte in BACKSPACES:
                if self._line:
                    del self._line[-1]
                    echo += b"\b \b"
            elif byte == INTERRUPT:
                self._line.clear()
                echo += ("^C\r\n" + self._prompt).encode()
            elif byte >= 0x20 or byte == ord("\t"):
                self._line.append(byte)
                echo.append(byte)
            self._last = byte
        if echo:
            self._output.put_nowait(bytes(echo))

    async def close(self) -> None:
        self.hang_up()

    def hang_up(self) -> None:
        """The console is gone (closed, or its domain's instance ended)."""
        if self._ended:
            return
        self._ended = True
        self._output.put_nowait(b"")
        self._release(self)


class SimConsoles:
    """The open console sessions of one host, by domain name: serial (one each) and screens
    (``_display``: any number each, as VNC shares a screen)."""

    def __init__(self) -> None:
        self._open: dict[str, SimConsoleSession] = {}
        self._screens: dict[str, set[SimScreenSession]] = {}

    def open(self, domain: str, vm_name: str) -> SimConsoleSession:
        if domain in self._open:
            raise ConsoleBusy(f"the console of {domain} is in use by another session")

        def release(session: SimConsoleSession) -> None:
            if self._open.get(domain) is session:
                del self._open[domain]

        session = self._open[domain] = SimConsoleSession(vm_name, release)
        return session

    def open_screen(self, domain: str, vm_name: str) -> SimScreenSession:
        def release(session: SimScreenSession) -> None:
            self._screens.get(domain, set()).discard(session)

        session = SimScreenSession(vm_name, release)
        self._screens.setdefault(domain, set()).add(session)
        return session

    def hang_up(self, domain: str) -> None:
        session = self._open.get(domain)
        if session is not None:
            session.hang_up()
        for screen in list(self._screens.pop(domain, ())):
            screen.hang_up()

    def hang_up_all(self) -> None:
        for domain in list(self._open) + list(self._screens):
            self.hang_up(domain)


__all__ = ["SimConsoleSession", "SimConsoles"]
