"""Watching a fleet converge without loading the server: read-only queries on its SQLite file
(or, for the PostgreSQL rows, on its database: the same questions in PostgreSQL's JSON words).

Waiting for 10,000 VMs through ``GET /v1/vms`` would cost the server more than what is
measured. The bench process reads the store file instead (WAL: readers never block the
server's writer), and takes the times from the server's own records: a VM became
Running when its Ready condition last turned True (``last_transition_time``, set by the
reconcile that saw it running).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

Target = Path | str
"""The SQLite file, or a PostgreSQL URL (SQLAlchemy's, as ``serve --db`` takes it)."""


class Reader:
    """One read-only connection: SQLite's, or PostgreSQL's (autocommit: each query sees now)."""

    def __init__(self, target: Target) -> None:
        self.sqlite = not (isinstance(target, str) and target.startswith("postgresql"))
        self._db: Any
        if self.sqlite:
            self._db = sqlite3.connect(f"file:{target}?mode=ro", uri=True, timeout=30.0)
        else:
            import psycopg
            from sqlalchemy.engine import make_url

            url = make_url(str(target)).set(drivername="postgresql")
            options = url.query.get("options")
            dsn = url.set(query={}).render_as_string(hide_password=False)
            self._db = psycopg.connect(dsn, autocommit=True, options=str(options or ""))

    def rows(self, sqlite_sql: str, pg_sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        if self.sqlite:
            return list(self._db.execute(sqlite_sql, params).fetchall())
        return list(self._db.execute(pg_sql, params).fetchall())

    def close(self) -> None:
        self._db.close()


def connect(target: Target) -> Reader:
    return Reader(target)


def count_phase(db: Reader, phase: str, name_like: str = "%") -> int:
    [row] = db.rows(
        "SELECT count(*) FROM objects WHERE kind = 'VirtualMachine' AND name LIKE ? "
        "AND json_extract(body, '$.status.phase') = ?",
        "SELECT count(*) FROM objects WHERE kind = 'VirtualMachine' AND name LIKE %s "
        "AND CAST(body AS json)->'status'->>'phase' = %s",
        (name_like, phase),
    )
    return int(row[0])


def count_ready_since(db: Reader, after: float, name_like: str = "%") -> int:
    """VMs whose Ready condition turned True in the second of ``after`` or later."""
    since = datetime.fromtimestamp(int(after), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    [row] = db.rows(
        "SELECT count(*) FROM objects, json_each(objects.body, '$.status.conditions') AS c "
        "WHERE objects.kind = 'VirtualMachine' AND objects.name LIKE ? "
        "AND json_extract(c.value, '$.type') = 'Ready' AND json_extract(c.value, '$.status') = 'True' "
        "AND json_extract(c.value, '$.last_transition_time') >= ?",
        "SELECT count(*) FROM objects, json_array_elements(CAST(objects.body AS json)->'status'->'conditions') "
        "AS c WHERE objects.kind = 'VirtualMachine' AND objects.name LIKE %s "
        "AND c->>'type' = 'Ready' AND c->>'status' = 'True' AND c->>'last_transition_time' >= %s",
        (name_like, since),
    )
    return int(row[0])


def wait_ready_since(
    db_path: Target, after: float, count: int, *, name_like: str = "%", timeout_s: float = 1800.0
) -> float:
    """Wait until ``count`` VMs turned Ready since ``after`` (a VM seeded Running shows Running
    until a reconcile finds its domain gone; its Ready condition tells a new start from that)."""
    return _wait(
        lambda db: count_ready_since(db, after, name_like), db_path, count, "Running again", timeout_s, 0.5
    )


def wait_phase(
    db_path: Target,
    phase: str,
    count: int,
    *,
    name_like: str = "%",
    timeout_s: float = 1800.0,
    every_s: float = 0.25,
) -> float:
    """Wait until ``count`` VMs (named like ``name_like``) are in ``phase``; returns when it was seen."""
    return _wait(lambda db: count_phase(db, phase, name_like), db_path, count, phase, timeout_s, every_s)


def _wait(
    counted: Callable[[Reader], int],
    db_path: Target,
    count: int,
    what: str,
    timeout_s: float,
    every_s: float,
) -> float:
    db = connect(db_path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            seen = counted(db)
            if seen >= count:
                return time.time()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{seen} of {count} VMs {what} after {timeout_s} s")
            time.sleep(every_s)
    finally:
        db.close()


def ready_times(db_path: Target, name_like: str = "%") -> dict[str, float]:
    """When each VM's Ready condition last turned True (epoch seconds); VMs not Ready are left out."""
    db = connect(db_path)
    try:
        rows = db.rows(
            "SELECT name, json_extract(body, '$.status.conditions') FROM objects "
            "WHERE kind = 'VirtualMachine' AND name LIKE ?",
            "SELECT name, CAST(CAST(body AS json)->'status'->'conditions' AS text) FROM objects "
            "WHERE kind = 'VirtualMachine' AND name LIKE %s",
            (name_like,),
        )
    finally:
        db.close()
    times: dict[str, float] = {}
    for name, conditions in rows:
        for condition in json.loads(conditions or "[]") or []:
            if condition.get("type") == "Ready" and condition.get("status") == "True":
                at = condition.get("last_transition_time")
                if at:
                    times[name] = parse_time(at)
    return times


def parse_time(value: str) -> float:
    """An API timestamp (ISO 8601, 'Z' or an offset) as epoch seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def body(db: Reader, kind: str, name: str) -> dict[str, object] | None:
    rows = db.rows(
        "SELECT body FROM objects WHERE kind = ? AND name = ?",
        "SELECT body FROM objects WHERE kind = %s AND name = %s",
        (kind, name),
    )
    return None if not rows else dict(json.loads(rows[0][0]))


def vm_ready_since(db: Reader, name: str) -> float | None:
    """When the VM's Ready condition turned True, if the VM is Running now."""
    vm = body(db, "VirtualMachine", name)
    status = vm.get("status") if vm else None
    if not isinstance(status, dict) or status.get("phase") != "Running":
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            at = condition.get("last_transition_time")
            return parse_time(at) if at else None
    return None
