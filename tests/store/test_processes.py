"""Several processes writing one SQLite file (``serve --workers``): every acknowledged write
stays, none is lost to another process's, and none fails for the lock another one holds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.store.store import Store

WRITER = textwrap.dedent(
    """
    import sys
    from virtplane.domain.resources import VirtualMachine
    from virtplane.store.errors import Conflict
    from virtplane.store.store import Store
    from virtplane.store.writes import StatusWrite

    store = Store(sys.argv[1])
    done = 0
    while done < int(sys.argv[2]):
        vm = store.get(VirtualMachine, "counter")
        try:
            if done % 2:  # as the controllers write: a status write in a group commit
                vm.status.message = f"{sys.argv[3]}-{done}"
                [outcome] = store.write_each([StatusWrite((vm,))])
                if isinstance(outcome, Exception):
                    raise outcome
            else:
                vm.metadata.labels["count"] = str(int(vm.metadata.labels["count"]) + 1)
                store.update(vm)
        except Conflict:
            continue  # another process wrote first: read again, as every writer does
        done += 1
    print(done)
    """
)


def test_sqlite_writers_in_several_processes_lose_no_update(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = Store(url)
    store.migrate()
    store.create(
        VirtualMachine(metadata=Metadata(name="counter", labels={"count": "0"}), spec=VirtualMachineSpec())
    )
    each = 150
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(each), f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    results = [w.communicate(timeout=120) for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0], [err[-2000:] for _, err in results]
    final = store.get(VirtualMachine, "counter")
    # each writer's label writes (every other one) all counted, none written over another's
    assert final.metadata.labels["count"] == str(3 * (each // 2 + each % 2))
    store.close()
