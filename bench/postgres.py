"""Rows 25-27: rows 1, 2 and 3 on PostgreSQL, each as a ratio to PostgreSQL's own raw ceiling.

The bench starts PostgreSQL as the tests do (``scripts/postgres.sh start``: a throw-away
cluster on loopback, fsync off; ``VIRTPLANE_TEST_PG_URL`` names another server), gives each
benchmarked server a schema of its own, and measures the ceiling on the same PostgreSQL in
the same run: the SQLite ceiling's transaction (a change row, then an insert or an update of a
~1.2 KB object row, one commit each) on one connection. A row is met when its ratio is at least
half of its SQLite row's in the same run (issue 38: "within 2x of SQLite's ratios").
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from bench import api, fleet
from bench.ceiling import _body
from bench.rows import Row
from bench.server import ROOT
from bench.sizes import Sizes

ROWS = frozenset({25, 26, 27})
OF_SQLITE = {25: 1, 26: 2, 27: 3}
"""Each PostgreSQL row, and the SQLite row it repeats."""
ENV = "VIRTPLANE_TEST_PG_URL"


def server_url() -> str | None:
    """The PostgreSQL server to use: the environment's, or one ``scripts/postgres.sh`` starts."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    started = subprocess.run(
        ["bash", str(ROOT / "scripts" / "postgres.sh"), "start"], capture_output=True, text=True, timeout=120
    )
    prefix = f"export {ENV}="
    for line in started.stdout.splitlines():
        if line.startswith(prefix):
            return line.removeprefix(prefix).strip()
    return None


@contextmanager
def schema(base_url: str) -> Iterator[str]:
    """A fresh schema on ``base_url``'s server; the URL whose connections use it. Dropped after."""
    from sqlalchemy import create_engine, text

    name = f"vp_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{name}"'))
        separator = "&" if "?" in base_url else "?"
        yield f"{base_url}{separator}options={quote(f'-csearch_path={name}')}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


def transactions_per_s(url: str, seconds: float = 3.0) -> float:
    """The raw ceiling: transactions per second, inserts of new rows alternating with updates."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(
                text(
                    "CREATE TABLE objects (kind TEXT, name TEXT, resource_version INTEGER, body TEXT, "
                    "PRIMARY KEY (kind, name))"
                )
            )
            connection.execute(
                text("CREATE TABLE changes (revision BIGSERIAL PRIMARY KEY, kind TEXT, name TEXT, op TEXT)")
            )
            connection.commit()
            raw = connection.connection.dbapi_connection
            assert raw is not None
            cursor = raw.cursor()
            done = inserted = 0
            started = time.perf_counter()
            deadline = started + seconds
            while time.perf_counter() < deadline:
                index = inserted if done % 2 == 0 or inserted == 0 else done % inserted
                name = f"obj-{index:06d}"
                op = "added" if index == inserted else "modified"
                cursor.execute(
                    "INSERT INTO changes (kind, name, op) VALUES ('Bench', %s, %s) RETURNING revision",
                    (name, op),
                )
                row = cursor.fetchone()
                revision = int(row[0]) if row else 0
                if op == "added":
                    cursor.execute(
                        "INSERT INTO objects VALUES ('Bench', %s, %s, %s)",
                        (name, revision, _body(index, revision)),
                    )
                    inserted += 1
                else:
                    cursor.execute(
                        "UPDATE objects SET resource_version = %s, body = %s WHERE kind = 'Bench' AND name = %s",
                        (revision, _body(index, revision), name),
                    )
                raw.commit()
                done += 1
            return done / (time.perf_counter() - started)
    finally:
        engine.dispose()


def on_postgres(row: Row, ceiling: float) -> Row:
    """SQLite's row ``row`` measured on PostgreSQL, as the PostgreSQL row."""
    number = next(pg for pg, sqlite in OF_SQLITE.items() if sqlite == row.number)
    return Row(
        number,
        f"{row.title}, on PostgreSQL",
        row.figure,
        row.unit,
        f"ratio >= half of row {row.number}'s",
        None,  # judged against the SQLite row of the same run (``judge``)
        ratio=row.ratio,
        details={**row.details, "ceiling_postgres_tx_per_s": round(ceiling)},
        note=row.note,
    )


def judge(rows: list[Row]) -> None:
    """Met or not: each PostgreSQL row's ratio against its SQLite row's, when both were measured."""
    by_number = {row.number: row for row in rows}
    for number, sqlite_number in OF_SQLITE.items():
        pg, sqlite = by_number.get(number), by_number.get(sqlite_number)
        if pg is None or pg.ratio is None:
            continue
        if sqlite is None or sqlite.ratio is None:
            pg.note = (pg.note + "; " if pg.note else "") + f"row {sqlite_number} not measured: not judged"
            continue
        pg.met = pg.ratio >= sqlite.ratio / 2
        pg.note = (pg.note + "; " if pg.note else "") + (
            f"{pg.ratio / sqlite.ratio:.2f} of row {sqlite_number}'s ratio ({sqlite.ratio})"
        )


async def run(work: Path, sizes: Sizes, _sqlite_ceiling: float, profile_dir: Path | None) -> list[Row]:
    wanted = sizes.selected if sizes.selected is not None else ROWS
    base = server_url()
    if base is None:
        why = "PostgreSQL is not installed here (scripts/postgres.sh)"
        return [
            Row(n, f"row {OF_SQLITE[n]} on PostgreSQL", None, "", "", None, note=why) for n in sorted(wanted)
        ]
    with schema(base) as url:
        ceiling = transactions_per_s(url, sizes.ceiling_s)
    print(f"raw-PostgreSQL ceiling: {ceiling:,.0f} transactions per s", flush=True)
    rows: list[Row] = []
    if wanted & {25, 27}:
        with schema(base) as url:
            measured = await api.run(work, sizes, ceiling, profile_dir, url)
        rows += [on_postgres(row, ceiling) for row in measured if row.number in (1, 3)]
    if 26 in wanted:
        with schema(base) as url:
            only_cold_start = dataclasses.replace(sizes, selected=frozenset({2}))
            measured = await fleet.run(work, only_cold_start, ceiling, profile_dir, url)
        rows += [on_postgres(row, ceiling) for row in measured if row.number == 2]
    return rows
