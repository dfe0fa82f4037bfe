"""The fleet-scale benchmarks of issue 13: ``python -m bench`` (or ``bin/bench``).

Every figure is measured through the real server (``virtplane.server.run_server`` in a
subprocess: SQLite, simulated hosts that boot in 0 s) driven over HTTP by async httpx
clients, in one run together with the raw-SQLite ceiling it is compared with. The run
writes ``bench/results/<date>.json`` and regenerates ``docs/benchmarks.md``;
``--short`` runs small sizes in a couple of minutes (what CI runs: it reports, it
asserts no times).
"""
