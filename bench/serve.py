"""The benchmarked server: ``virtplane serve`` with the simulator's link set by the bench.

``python -m bench.serve DATA_DIR PORT [--link-mib-s X] [--migration-tick-s T] [--db URL]`` runs
``virtplane.server.run_server`` (the same code as ``virtplane serve``) with simulated
hosts that boot and shut down in 0 s, logging warnings only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from virtplane.api.limits import RequestLimits
from virtplane.server import ServeOptions, run_server


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serve")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("port", type=int)
    parser.add_argument("--link-mib-s", type=float, default=1000.0)
    parser.add_argument("--migration-tick-s", type=float, default=0.05)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--db", default=None, help="a database URL (PostgreSQL rows); default SQLite")
    args = parser.parse_args()
    run_server(
        ServeOptions(
            data_dir=args.data_dir,
            port=args.port,
            db_url=args.db,
            log_level=args.log_level,
            sim_boot_seconds=0.0,
            sim_shutdown_seconds=0.0,
            sim_link_mib_s=args.link_mib_s,
            sim_migration_tick_s=args.migration_tick_s,
            # row 1 measures how many writes one token's clients can make: no rate limit on them
            request_limits=RequestLimits(writes_per_second=0),
        )
    )


if __name__ == "__main__":
    main()
