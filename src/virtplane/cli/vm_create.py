"""``virtplane vm create``, ``vm clone`` and ``vm template``: new VMs from flags or from a template.

All of them go through ``POST /v1/vms/actions/create`` (``domain.clones``): one request for
one VM or ``--count`` of them, each with its own volumes, checked whole before anything is
written. ``--dry-run -o yaml`` prints the manifests as the server admitted them, ready for
``apply -f``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from virtplane.cli.completion import complete_vm
from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import CliError, JsonObject
from virtplane.cli.output import OutputFormat, dig, print_structured
from virtplane.domain.api_version import API_VERSION

__all__ = ["choose_pool", "register"]

DEFAULT_ROOT_SIZE = "10Gi"
"""The root disk of ``--image`` without ``--size`` (a smaller image's copy grows to it)."""


def choose_pool(pools: list[JsonObject]) -> str | None:
    """The volume pool for new disks when none is named: a shared one (its VMs may run on any of
    its hosts and migrate), never a host's local pool (that would pin the VM to the host); of
    several, the one most hosts reach, then by name. The dashboard's New VM dialog chooses alike."""
    shared = [
        p
        for p in pools
        if dig(p, "spec.kind") == "shared"
        and dig(p, "spec.content", "volumes") == "volumes"
        and dig(p, "metadata.deletion_requested_at") is None
    ]
    if not shared:
        return None
    best = min(
        shared, key=lambda p: (-len(dig(p, "status.reachable_hosts") or []), str(dig(p, "metadata.name")))
    )
    return str(dig(best, "metadata.name"))


def _size(value: str | None, unit: str, option: str) -> int | None:
    """``value`` in whole MiB or GiB (``unit``), checked here so that a typo is exit 2 at once."""
    if value is None:
        return None
    from virtplane.domain.sizes import GIB, MIB, parse_size  # pydantic: only for this command

    try:
        return parse_size(value, MIB if unit == "MiB" else GIB)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=option) from None


def _names(name: str, count: int) -> list[str]:
    return [name] if count == 1 else [f"{name}-{i}" for i in range(1, count + 1)]


def _ssh_key(value: str) -> str:
    """A key, or ``@FILE`` holding one (``@~/.ssh/id_ed25519.pub``)."""
    if not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    try:
        return path.read_text().strip()
    except OSError as error:
        raise typer.BadParameter(f"cannot read {path}: {error.strerror}", param_hint="--ssh-key") from None


def _labels(values: list[str]) -> dict[str, str]:
    labels = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key:
            raise typer.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--label")
        labels[key] = text
    return labels


def _manifest(doc: JsonObject) -> JsonObject:
    """What ``apply -f`` takes back: kind, name, labels, spec (no status, nothing the server sets)."""
    metadata = {"name": dig(doc, "metadata.name")}
    if dig(doc, "metadata.labels"):
        metadata["labels"] = dig(doc, "metadata.labels")
    return {"apiVersion": API_VERSION, "kind": doc.get("kind"), "metadata": metadata, "spec": doc.get("spec")}


def _send(state: CliState, body: JsonObject, dry_run: bool, output: OutputFormat) -> None:
    answer = state.client.post("/v1/vms/actions/create", body, dry_run=dry_run)
    items: list[JsonObject] = [i for i in answer.get("items") or [] if isinstance(i, dict)]
    if output in (OutputFormat.YAML, OutputFormat.JSON):
        manifests = [_manifest(i) for i in items]
        if output is OutputFormat.YAML:
            import yaml  # here, not at the top: every command imports the CLI's modules

            typer.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)
        else:
            print_structured({"items": manifests}, output)
        return
    done = "admitted (dry run: nothing written)" if dry_run else "created"
    for item in items:
        kind = "vm" if item.get("kind") == "VirtualMachine" else str(item.get("kind", "")).lower()
        state.console.print(Text(f"{kind}/{dig(item, 'metadata.name')} {done}"))
    if not dry_run:
        state.console.print(Text(f"batch {answer.get('batch')}: -l virtplane.io/batch={answer.get('batch')}"))


NameArgument = Annotated[
    str, typer.Argument(help="The VM's name (with --count: NAME-1 ... NAME-N).", show_default=False)
]
CountOption = Annotated[
    int, typer.Option("--count", min=1, max=100, help="Make N VMs at once: NAME-1 ... NAME-N.")
]
LinkedOption = Annotated[
    bool,
    typer.Option(
        "--linked",
        help="Each disk a linked clone of the template's or snapshot's (a qcow2 overlay on it, in its shared pool) "
        "instead of a full copy; refused, saying why, where that cannot be made.",
    ),
]
StartOption = Annotated[
    bool,
    typer.Option(
        "--start",
        help="Start them now and keep them running (run policy AlwaysOnUnlessStoppedManually); "
        "without it they are Manual and stay off until `vm start`.",
    ),
]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Have the server check everything and answer; write nothing.")
]
OutputFormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--output", "-o", case_sensitive=False, help="yaml or json: the manifests; table: one line each."
    ),
]


def create(
    ctx: typer.Context,
    name: NameArgument,
    image: Annotated[
        str | None,
        typer.Option("--image", help="A Disk image: the root disk is a copy of it.", show_default=False),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            "--size",
            help=f"Root disk size, e.g. 20Gi (default {DEFAULT_ROOT_SIZE} with --image).",
            show_default=False,
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool",
            help="Volume pool of the root disk (default: a shared pool of the cluster).",
            show_default=False,
        ),
    ] = None,
    cpu: Annotated[
        int | None, typer.Option("--cpu", min=1, max=256, help="vCPUs.", show_default=False)
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option("--memory", help="Memory, e.g. 4Gi or 512Mi (a plain number: MiB).", show_default=False),
    ] = None,
    network: Annotated[
        list[str] | None,
        typer.Option("--network", help="A NIC on this Network (repeat for more).", show_default=False),
    ] = None,
    ssh_key: Annotated[
        list[str] | None,
        typer.Option(
            "--ssh-key", help="An authorized SSH key, or @FILE (repeat for more).", show_default=False
        ),
    ] = None,
    user_data: Annotated[
        Path | None,
        typer.Option(
            "--user-data",
            help="A cloud-init user-data file.",
            show_default=False,
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", help="KEY=VALUE on the VMs and their disks (repeat for more).", show_default=False
        ),
    ] = None,
    template: Annotated[
        str | None,
        typer.Option(
            "--template",
            help="Copy this template (or stopped VM): its disks and spec; flags change the spec.",
            show_default=False,
            autocompletion=complete_vm,
        ),
    ] = None,
    snapshot: Annotated[
        str | None,
        typer.Option(
            "--snapshot",
            help="Copy this snapshot, as --template: the spec it captured and its disks as it saved them.",
            show_default=False,
        ),
    ] = None,
    count: CountOption = 1,
    start: StartOption = False,
    linked: LinkedOption = False,
    dry_run: DryRunOption = False,
    output: OutputFormatOption = OutputFormat.TABLE,
) -> None:
    """Create a VM (or --count of them): a root disk from an image, NICs, cloud-init, or a copy of a template."""
    state = state_of(ctx)
    spec: dict[str, Any] = {}
    if cpu is not None:
        spec["cpu"] = cpu
    memory_mib = _size(memory, "MiB", "--memory")
    if memory_mib is not None:
        spec["memory_mib"] = memory_mib
    if network:
        spec["nics"] = [{"network": n} for n in network]
    if ssh_key or user_data:
        cloud_init: dict[str, Any] = {}
        if ssh_key:
            cloud_init["ssh_authorized_keys"] = [_ssh_key(k) for k in ssh_key]
        if user_data:
            cloud_init["user_data"] = user_data.read_text()
        spec["cloud_init"] = cloud_init
    volumes = []
    if template is not None and snapshot is not None:
        raise typer.BadParameter("copy a template or a snapshot, not both", param_hint="--snapshot")
    if (template is not None or snapshot is not None) and (image or size or pool):
        raise typer.BadParameter(
            "a template's disks are copied as they are: no --image, --size or --pool with it",
            param_hint="--template",
        )
    if image or size:
        size_gib = _size(size or DEFAULT_ROOT_SIZE, "GiB", "--size")
        chosen = pool or choose_pool(state.client.list_items("storagepools"))
        if chosen is None:
            raise CliError(
                "NoSharedPool",
                "no shared volume pool to put the disk in: name one with --pool (a local pool pins the VM to its host)",
            )
        volume_spec: dict[str, Any] = {"pool": chosen, "size_gib": size_gib}
        if image:
            volume_spec["source"] = {"image": image}
        volumes.append({"suffix": "root", "spec": volume_spec, "boot_order": 1})
    body: JsonObject = {
        "names": _names(name, count),
        "spec": spec,
        "volumes": volumes,
        "labels": _labels(label or []),
        "run_policy": "AlwaysOnUnlessStoppedManually" if start else "Manual",
    }
    if template is not None:
        body["template"] = template
    if linked:
        body["linked"] = True
    if snapshot is not None:
        body["snapshot"] = snapshot
    _send(state, body, dry_run, output)


def clone(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="The template, or a stopped VM, to copy.", show_default=False, autocompletion=complete_vm
        ),
    ],
    name: NameArgument,
    count: CountOption = 1,
    start: StartOption = False,
    linked: LinkedOption = False,
    dry_run: DryRunOption = False,
    output: OutputFormatOption = OutputFormat.TABLE,
) -> None:
    """Copy a template or a stopped VM: copies of its disks (full, or --linked), new MACs, addresses and cloud-init instance id."""
    body: JsonObject = {
        "names": _names(name, count),
        "template": source,
        "run_policy": "AlwaysOnUnlessStoppedManually" if start else "Manual",
    }
    if linked:
        body["linked"] = True
    _send(state_of(ctx), body, dry_run, output)


def make_template(
    ctx: typer.Context,
    vm: Annotated[str, typer.Argument(help="A stopped VM.", show_default=False, autocompletion=complete_vm)],
) -> None:
    """Make a stopped VM a template: it never runs again (AlwaysOff), and new VMs copy its disks."""
    state = state_of(ctx)
    state.client.patch("vms", vm, {"spec": {"template": True, "run_policy": "AlwaysOff"}})
    state.console.print(Text(f"vm/{vm} is a template: virtplane vm create NAME --template {vm}"))


EPILOG = (
    "Examples:\n"
    "  virtplane vm create web-1 --image debian-12 --size 20Gi --cpu 2 --memory 4Gi --network lan --start\n"
    "  virtplane vm create web --image debian-12 --network lan --ssh-key @~/.ssh/id_ed25519.pub --count 3\n"
    "  virtplane vm create db-1 --image debian-12 --memory 8Gi --dry-run -o yaml\n"
    "  virtplane vm template golden\n"
    "  virtplane vm create app --template golden --count 10 --start\n"
    "  virtplane vm clone golden web-4\n"
    "  virtplane vm create app --template golden --count 10 --linked   # overlays on golden's disks\n"
    "  virtplane vm create web-5 --snapshot web-1-before-upgrade --start"
)


def register(vm_app: typer.Typer) -> None:
    vm_app.command("create", epilog=EPILOG)(create)
    vm_app.command("clone", epilog=EPILOG)(clone)
    vm_app.command("template", epilog=EPILOG)(make_template)
