"""``virtplane vm import-ova FILE|URL --pool P [--name N] [--network NET] [--start]`` (admin):
a VM from an OVA, with the CPU, memory, disks and NICs its OVF gives.

A file is sent as it is read (its SHA-256 computed here first, unless given), with progress
bars on a terminal; a URL is fetched by the server, which then needs the SHA-256. Either way
the server converts the disks, writes them into the image library and creates the VM (Stopped
unless ``--start``); a refused import leaves nothing, so the same command again starts clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import CliError
from virtplane.cli.images import ANSWER_TIMEOUT_S, chunks_of, digest_of, transfer_progress

__all__ = ["register"]

PATH = "/v1/vms/actions/import-ova"

EPILOG = (
    "Examples:\n"
    "  virtplane vm import-ova appliance.ova --pool shared --network lan\n"
    "  virtplane vm import-ova appliance.ova --name web-9 --pool shared --network lan --network storage --start\n"
    "  virtplane vm import-ova https://mirror.example/app.ova --sha256 HEX --pool shared --network lan\n\n"
    "Each disk becomes an Image NAME-diskN in the image library (--library, when there are several) "
    "and a volume NAME-diskN in --pool; the first disk boots. Delete the Images when no more VMs are "
    "to be made from them."
)


def import_ova(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="The OVA: a file, or an http(s) URL the server fetches.")],
    pool: Annotated[str, typer.Option("--pool", help="The volume pool the VM's disks go to.")],
    name: Annotated[
        str | None, typer.Option("--name", help="The VM's name (default: the OVF's).", show_default=False)
    ] = None,
    network: Annotated[
        list[str] | None,
        typer.Option(
            "--network",
            help="The network of the OVF's NICs: once for all, or once per NIC in order.",
            show_default=False,
        ),
    ] = None,
    library: Annotated[
        str | None,
        typer.Option(
            "--library",
            help="The image library the disks go through (default: the only one).",
            show_default=False,
        ),
    ] = None,
    sha256: Annotated[
        str | None,
        typer.Option("--sha256", help="The OVA's SHA-256 (needed for a URL; computed here for a file)."),
    ] = None,
    start: Annotated[
        bool,
        typer.Option("--start", help="Start it now and keep it running (AlwaysOnUnlessStoppedManually)."),
    ] = False,
) -> None:
    """Create a VM from an OVA: its OVF's CPU, memory, disks (as volumes in --pool) and NICs (admin)."""
    state = state_of(ctx)
    networks = network or []
    if source.startswith(("http://", "https://")):
        if sha256 is None:
            raise typer.BadParameter(
                "the server checks a fetched OVA against its SHA-256: give it", param_hint="--sha256"
            )
        body: dict[str, Any] = {
            "url": source,
            "sha256": sha256.lower(),
            "pool": pool,
            "networks": networks,
            "start": start,
        }
        body |= {key: value for key, value in (("name", name), ("library", library)) if value is not None}
        with state.err_console.status(
            "the server fetches the OVA, converts its disks and writes them to the hosts"
        ):
            answer = state.client.request("POST", PATH, body=body, read_timeout_s=ANSWER_TIMEOUT_S)
    else:
        answer = _uploaded(state, Path(source), pool, name, networks, library, sha256, start)
    _report(state, answer)


def _uploaded(
    state: CliState,
    file: Path,
    pool: str,
    name: str | None,
    networks: list[str],
    library: str | None,
    sha256: str | None,
    start: bool,
) -> Any:
    if not file.is_file():
        raise CliError("NotFound", f"{file} is not a file (nor an http(s) URL)")
    size = file.stat().st_size
    params: dict[str, str | list[str]] = {
        "pool": pool,
        "sha256": (sha256 or digest_of(state, file, size)).lower(),
        "network": networks,
        "start": "true" if start else "false",
    }
    params |= {key: value for key, value in (("name", name), ("library", library)) if value is not None}
    with transfer_progress(state, size, "upload") as advance:
        return state.client.upload(PATH, chunks_of(file, advance), size, params, ANSWER_TIMEOUT_S)


def _report(state: CliState, answer: Any) -> None:
    items = [item for item in (answer or {}).get("items", []) if isinstance(item, dict)]
    for item in items:
        kind = "vm" if item.get("kind") == "VirtualMachine" else str(item.get("kind", "")).lower()
        state.console.print(Text(f"{kind}/{item.get('metadata', {}).get('name')} created"))
    vm = next((i for i in items if i.get("kind") == "VirtualMachine"), None)
    if vm is not None:
        spec = vm.get("spec", {})
        state.console.print(
            Text(
                f"{spec.get('cpu')} vCPU, {spec.get('memory_mib')} MiB, {len(spec.get('disks', []))} disks, "
                f"{len(spec.get('nics', []))} NICs, as the OVF asks; run policy {spec.get('run_policy')}"
            )
        )


def register(vm_app: typer.Typer) -> None:
    vm_app.command("import-ova", epilog=EPILOG)(import_ova)
