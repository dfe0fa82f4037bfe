"""The flags of ``serve`` that bound what clients may cost (docs/operations.md, "Limits").

Kept apart from ``main.py``: typer reads them from ``serve``'s signature, as the aliases here.
Their defaults are those of ``ConnectionLimits`` and ``RequestLimits``, which the server
imports lazily; they are repeated here so that ``--help`` of the client commands stays light.
"""

from __future__ import annotations

from typing import Annotated

import typer

PANEL = "Limits on clients"

MaxHeaderBytes = Annotated[
    int,
    typer.Option(
        "--max-header-bytes",
        min=1024,
        help="The request line and headers of one request at most; more: 431.",
        rich_help_panel=PANEL,
    ),
]
MaxHeaders = Annotated[
    int,
    typer.Option(
        "--max-headers", min=8, help="Header fields of one request at most; more: 431.", rich_help_panel=PANEL
    ),
]
HeaderTimeout = Annotated[
    float,
    typer.Option(
        "--header-timeout",
        min=0.1,
        help="Seconds a client has to send a request's headers, from its first byte or the "
        "connection's opening; then 408 and the connection is closed (its body too: then the "
        "connection is closed).",
        rich_help_panel=PANEL,
    ),
]
IdleTimeout = Annotated[
    int,
    typer.Option(
        "--idle-timeout",
        min=1,
        help="Seconds a kept-alive connection may wait for its next request before it is closed.",
        rich_help_panel=PANEL,
    ),
]
MaxConnections = Annotated[
    int,
    typer.Option(
        "--max-connections",
        min=1,
        help="Open connections at most (size the service's open-files limit above it); "
        "a new one beyond gets 503 and is closed.",
        rich_help_panel=PANEL,
    ),
]
MaxConnectionsPerClient = Annotated[
    int,
    typer.Option(
        "--max-connections-per-client",
        min=1,
        help="Open connections from one client address at most; a new one beyond gets 429 and is closed.",
        rich_help_panel=PANEL,
    ),
]
MaxWatchesPerToken = Annotated[
    int,
    typer.Option(
        "--max-watches-per-token",
        min=1,
        help="Watches (watch=1) one token may hold open at once; more: 429 TooManyWatches.",
        rich_help_panel=PANEL,
    ),
]
WritesPerSecond = Annotated[
    float,
    typer.Option(
        "--writes-per-second",
        min=0.0,
        help="Writes (POST, PUT, PATCH, DELETE) per second one token may make, sustained; "
        "more: 429 TooManyWrites. 0: no limit.",
        rich_help_panel=PANEL,
    ),
]
WriteBurst = Annotated[
    int,
    typer.Option(
        "--write-burst",
        min=1,
        help="Writes one token may make at once after a quiet while.",
        rich_help_panel=PANEL,
    ),
]
