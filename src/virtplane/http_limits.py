"""What a client may cost the server before the application sees its request.

uvicorn bounds none of it: httptools reads a header of any size (its partial header values
are joined by repeated concatenation, so a 128 MiB header costs the shared event loop
seconds of CPU), a half-sent request is kept open for ever (its keep-alive timeout runs only
between requests), and ``limit_concurrency`` answers 503 only once a request's headers are
complete, while the idle connections it would have to count hold file descriptors already.
So these limits live in a subclass of uvicorn's httptools protocol, where the bytes arrive
(docs/decisions.md, "Limits in front of the application"):

- the request head (request line and headers) is fed to the parser only up to
  ``max_header_bytes``, and at most ``max_headers`` fields: 431;
- a head not complete ``header_timeout_s`` after its first byte (or after the connection
  opened): 408, and the connection is closed; a body not complete by then: the connection
  is closed;
- connections in total and per client address: beyond them a new connection gets 503
  (in total) or 429 (per client) and is closed at once.

A streamed body (an image upload, ``streamed_body``) may take as long as it keeps coming:
its deadline moves ``header_timeout_s`` past each piece that arrives.

Every refusal is JSON ``{"reason", "message"}`` like the application's, with
``Connection: close``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

LINGER_S = 1.0
"""How long a refused connection stays half-closed for its client to read the answer."""
LINGER_BYTES = 64 * 1024
"""What a refused connection's client may still send meanwhile; beyond it the socket is closed."""


_STREAMED_BODY_PATH = re.compile(r"/v1/images/[^/]+/content|/v1/vms/actions/import-ova")


def streamed_body(method: str, path: str) -> bool:
    """A request whose body is a file the route streams to disk (an image upload, an OVA): not bounded
    by the API's body size (the route has its quota), nor by time while it keeps coming."""
    return method == "PUT" and _STREAMED_BODY_PATH.fullmatch(path) is not None


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits of ``serve`` (flags ``--max-header-bytes`` and so on; docs/operations.md)."""

    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    max_connections: int = 1000
    max_connections_per_client: int = 100
    idle_timeout_s: int = 5
    """How long a kept-alive connection may wait for its next request (uvicorn's keep-alive)."""


class Refusal(Exception):
    """Raised from a parser callback: the request is answered ``status`` and the connection closed."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class ClientCounts:
    """The open connections of each client address, shared by every connection of one server."""

    def __init__(self) -> None:
        self.total = 0
        self.per_client: Counter[str] = Counter()

    def admit(self, client: str, limits: ConnectionLimits) -> Refusal | None:
        if self.total >= limits.max_connections:
            return Refusal(
                503, "TooManyConnections", f"the server holds {limits.max_connections} connections already"
            )
        if self.per_client[client] >= limits.max_connections_per_client:
            return Refusal(
                429,
                "TooManyConnections",
                f"{limits.max_connections_per_client} connections from {client} are open already",
            )
        self.total += 1
        self.per_client[client] += 1
        return None

    def release(self, client: str) -> None:
        self.total -= 1
        self.per_client[client] -= 1
        if self.per_client[client] <= 0:
            del self.per_client[client]


def refusal_bytes(refusal: Refusal) -> bytes:
    body = json.dumps({"reason": refusal.reason, "message": refusal.message}).encode()
    return b"".join(
        [
            STATUS_LINE[refusal.status],
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of ``ConnectionLimits`` (module docstring).

    Made per server by ``limited_protocol``, which sets the two class attributes.
    """

    limits: ConnectionLimits = ConnectionLimits()
    counts: ClientCounts = ClientCounts()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes belong to a request's head
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted_as: str | None = None
        self._lingering: int | None = None  # once refused: the bytes it may still drop
        self._streamed = False  # the request's body is streamed: its deadline moves as it comes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else "unknown"
        refusal = self.counts.admit(client, self.limits)
        if refusal is not None:
            self._refuse(refusal)
            return
        self._counted_as = client
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _release(self) -> None:
        if self._counted_as is not None:
            self.counts.release(self._counted_as)
            self._counted_as = None

    def handle_websocket_upgrade(self) -> None:
        super().handle_websocket_upgrade()
        # The websocket protocol takes the transport over: this one hears of its end no more,
        # so the new protocol gives the connection's place back when it is lost.
        protocol = self.transport.get_protocol()
        lost = protocol.connection_lost

        def connection_lost(exc: Exception | None) -> None:
            self._release()
            lost(exc)

        protocol.connection_lost = connection_lost  # type: ignore[method-assign]

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing() or not data:
            return
        if self._lingering is not None:  # refused: dropped, up to a point
            self._lingering -= len(data)
            if self._lingering < 0:
                self.transport.close()
            return
        if not self._in_head:
            if self._streamed and self._head_timer is not None:
                self._disarm_head_timer()
                self._arm_head_timer()
            super().data_received(data)
            return
        room = self.limits.max_header_bytes - self._head_bytes
        head, rest = data[:room], data[room:]
        self._head_bytes += len(head)
        if head:
            self._feed(head)
        if rest and not self.transport.is_closing():
            if self._in_head:  # the head is still not complete after max_header_bytes
                self._refuse(
                    Refusal(
                        431,
                        "RequestHeaderFieldsTooLarge",
                        f"request line and headers are limited to {self.limits.max_header_bytes} bytes",
                    )
                )
                return
            self.data_received(rest)

    def _feed(self, data: bytes) -> None:
        try:
            super().data_received(data)
        except Refusal as refusal:  # not from the parser's callbacks: uvicorn's own handling
            self._refuse(refusal)

    # The parser's callbacks. One that raises ends feed_data with HttpParserCallbackError,
    # which uvicorn answers 400: a Refusal among them is found on the error's context.
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._arm_head_timer()

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) >= self.limits.max_headers:
            raise Refusal(
                431,
                "RequestHeaderFieldsTooLarge",
                f"requests are limited to {self.limits.max_headers} headers",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self.parser.should_upgrade():  # a websocket: its own protocol takes over
            self._disarm_head_timer()
        super().on_headers_complete()
        self._streamed = streamed_body(self.scope.get("method", ""), self.scope.get("path", ""))

    def on_message_complete(self) -> None:
        self._disarm_head_timer()  # the body too had to come within the timeout
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0

    def send_400_response(self, msg: str) -> None:
        error = self._parser_refusal()
        if error is not None:
            self._refuse(error)
        else:
            super().send_400_response(msg)

    def _parser_refusal(self) -> Refusal | None:
        """The Refusal a callback raised, if the parser error being answered came from one."""
        exc = sys.exc_info()[1]
        if isinstance(exc, httptools.HttpParserError) and isinstance(exc.__context__, Refusal):
            return exc.__context__
        return None

    # The head's timer.
    def _arm_head_timer(self) -> None:
        if self._head_timer is None and self.limits.header_timeout_s > 0:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        limit = self.limits.header_timeout_s
        if self._in_head:
            self._refuse(
                Refusal(408, "RequestTimeout", f"the request's headers took longer than {limit:g} s")
            )
        else:
            # A body still short of its Content-Length: the route may be reading it, and
            # may have begun its answer, so no 408 of ours; it hears of the disconnection.
            self.transport.close()

    def _refuse(self, refusal: Refusal) -> None:
        """Answer and close, reading (and dropping) a little of what the client still sends
        meanwhile: closed with its request unread, the socket would be reset, and the client
        could lose the answer before reading it."""
        self._disarm_head_timer()
        if self.transport.is_closing() or self._lingering is not None:
            return
        self.transport.write(refusal_bytes(refusal))
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._lingering = LINGER_BYTES
        self.loop.call_later(LINGER_S, self.transport.close)


def limited_protocol(limits: ConnectionLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for one server, with ``limits`` and its own connection counts."""
    return type(
        "LimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {"limits": limits, "counts": ClientCounts()},
    )
