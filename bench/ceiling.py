"""The raw-SQLite ceiling: what the machine's SQLite does with no control plane around it.

A plain ``sqlite3`` loop of transactions, each an insert or an update of a ~1.2 KB row
plus a change row, with the store's pragmas (WAL, synchronous=NORMAL). It is measured in
the same run as the rows, so that a row's figure divided by it compares across machines.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

BODY_BYTES = 1200


def _body(index: int, version: int) -> str:
    filler = "x" * (BODY_BYTES - 120)
    return json.dumps({"metadata": {"name": f"obj-{index:06d}", "resource_version": version}, "spec": filler})


def transactions_per_s(path: Path, seconds: float = 3.0) -> float:
    """Transactions per second, alternating inserts of new rows and updates of old ones."""
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE objects (kind TEXT, name TEXT, resource_version INTEGER, body TEXT, "
            "PRIMARY KEY (kind, name))"
        )
        db.execute(
            "CREATE TABLE changes (revision INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT, name TEXT, op TEXT)"
        )
        done = inserted = 0
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < deadline:
            db.execute("BEGIN")
            if done % 2 == 0 or inserted == 0:
                name = f"obj-{inserted:06d}"
                revision = db.execute(
                    "INSERT INTO changes (kind, name, op) VALUES ('Bench', ?, 'added')", (name,)
                ).lastrowid
                db.execute(
                    "INSERT INTO objects VALUES ('Bench', ?, ?, ?)",
                    (name, revision, _body(inserted, revision or 0)),
                )
                inserted += 1
            else:
                index = done % inserted
                name = f"obj-{index:06d}"
                revision = db.execute(
                    "INSERT INTO changes (kind, name, op) VALUES ('Bench', ?, 'modified')", (name,)
                ).lastrowid
                db.execute(
                    "UPDATE objects SET resource_version = ?, body = ? WHERE kind = 'Bench' AND name = ?",
                    (revision, _body(index, revision or 0), name),
                )
            db.execute("COMMIT")
            done += 1
        return done / (time.perf_counter() - started)
    finally:
        db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
