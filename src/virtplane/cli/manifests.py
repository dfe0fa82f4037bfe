"""``apply``: read YAML manifests, check them locally, create or update each resource.

Update rules for a resource that exists already:

- ``spec`` is replaced by the manifest's spec (defaults filled in by the server);
- ``metadata.labels`` are replaced when the manifest has ``labels``, kept otherwise;
- ``metadata.annotations`` are merged: the manifest's keys win, others are kept,
  because the control plane records durable intents there;
- the write carries the ``resource_version`` just read, and is retried on Conflict.

A resource that the server already holds as it would store the manifest (its answer to
the update sent as a dry run: defaults and the fields the server fills, such as a NIC's
MAC and address, included) is reported ``unchanged`` and not written.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from virtplane.cli.errors import ApiError, CliError, JsonObject
from virtplane.cli.kinds import KINDS, KindInfo, kind_by_name, resolve_kind
from virtplane.domain.api_version import API_VERSION

if TYPE_CHECKING:  # imported where used: every command imports this module (issue 39)
    import yaml

    from virtplane.cli.client import ApiClient

__all__ = ["Manifest", "apply_manifest", "load_manifests", "plan", "same_object", "what_apply_writes"]

UPDATE_ATTEMPTS = 3


@dataclass(frozen=True)
class Manifest:
    kind: KindInfo
    name: str
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    spec: JsonObject
    file: str = "stdin"
    line: int = 1
    document: int = 1
    node: yaml.Node | None = field(default=None, compare=False, repr=False)
    """Its YAML, to find the line of a field."""

    @property
    def reference(self) -> str:
        return f"{self.kind.short}/{self.name}"

    @property
    def source(self) -> str:
        """Where it came from, e.g. ``fleet.yaml:9 (document 2)``."""
        return _source(self.file, self.line, self.document)

    def located(self, error: CliError | None = None) -> str:
        """``vm/web-1 in fleet.yaml:9 (document 2)``, for the server's errors about it; at the
        line of the first field the server names (``spec.memory``) where there is one."""
        fields = error.fields if isinstance(error, ApiError) else []
        line = line_of(self.node, fields[0]) if fields and self.node is not None else None
        return f"{self.reference} in {_source(self.file, line or self.line, self.document)}"


def _source(file: str, line: int, document: int) -> str:
    return f"{file}:{line} (document {document})"


def line_of(node: yaml.Node, path: str) -> int | None:
    """The line (1-based) of the field at ``path`` (``spec.nics.0.ip``) in a document, or of the
    deepest part of it that is there; None if not even its first part is."""
    import yaml

    line = None
    for part in path.split("."):
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if found is None:
                return line
            line, node = found[0].start_mark.line + 1, found[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def load_manifests(filename: str, text: str) -> list[Manifest]:
    """Parse and check every document of one file; raise ``CliError`` naming the bad document."""
    import yaml

    label = "stdin" if filename == "-" else filename
    try:
        documents = _documents(label, text)
    except yaml.MarkedYAMLError as error:
        raise CliError("InvalidManifest", f"{label} is not valid YAML: {_where(error)}") from error
    except yaml.YAMLError as error:
        raise CliError("InvalidManifest", f"{label} is not valid YAML: {error}") from error
    manifests = []
    for index, (document, line, node) in enumerate(documents, start=1):
        if document is None:  # an empty document, e.g. after a trailing '---'
            continue
        manifest = _check_document(document, _source(label, line, index))
        manifests.append(replace(manifest, file=label, line=line, document=index, node=node))
    if not manifests:
        raise CliError("InvalidManifest", f"{label} contains no documents")
    return manifests


def _documents(label: str, text: str) -> list[tuple[Any, int, yaml.Node | None]]:
    """Each document, the line it starts on (1-based) and its nodes, read as
    ``yaml.safe_load_all`` does."""
    import yaml

    stream = io.StringIO(text)
    stream.name = label  # PyYAML names a stream's errors by its name
    loader = yaml.SafeLoader(stream)
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else 1
            documents.append((loader.construct_document(node), line, node))
    finally:
        loader.dispose()
    return documents


def _where(error: yaml.MarkedYAMLError) -> str:
    """``line 3, column 7: expected ',' or ']' (while parsing a flow sequence from line 1)``."""
    mark = error.problem_mark or error.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = error.problem or error.context or "cannot be parsed"
    context = ""
    if error.context and error.problem and error.context_mark is not None:
        context = f" ({error.context} from line {error.context_mark.line + 1})"
    return f"{where}{problem}{context}"


def _check_document(document: Any, source: str) -> Manifest:
    def invalid(message: str) -> CliError:
        return CliError("InvalidManifest", f"{source}: {message}")

    if not isinstance(document, dict):
        raise invalid(
            f"expected a mapping with apiVersion, kind, metadata and spec, got {type(document).__name__}"
        )
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        raise invalid(
            f"apiVersion is {api_version!r}, expected {API_VERSION!r}"
            if api_version is not None
            else f"apiVersion is missing; use {API_VERSION!r}"
        )
    kind_text = document.get("kind")
    if not isinstance(kind_text, str) or not kind_text:
        raise invalid("kind is missing")
    info = kind_by_name(kind_text)
    if info is None:
        hint = ""
        with contextlib.suppress(CliError):
            hint = f" (did you mean {resolve_kind(kind_text).kind!r}?)"
        known = ", ".join(k.kind for k in KINDS)
        raise invalid(f"kind {kind_text!r} is not one of {known}{hint}")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise invalid("metadata.name is missing")
    spec = document.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise invalid("spec must be a mapping")
    labels = _string_map(metadata.get("labels"), "metadata.labels", invalid)
    annotations = _string_map(metadata.get("annotations"), "metadata.annotations", invalid)
    return Manifest(
        kind=info,
        name=metadata["name"],
        labels=labels,
        annotations=annotations,
        spec=spec,
    )


def _string_map(value: Any, field: str, invalid: Callable[[str], CliError]) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(f"{field} must be a mapping")
    return {str(key): str(item) for key, item in value.items()}


def apply_manifest(client: ApiClient, manifest: Manifest, *, dry_run: bool = False) -> str:
    """Create or update one resource; return ``created``, ``configured`` or ``unchanged``.

    Whether it is unchanged is the server's word: the update is first sent as a dry run,
    and what the server would store (defaults and the fields it fills, a NIC's MAC and
    address, included) is compared with what it has. With ``dry_run`` nothing is written.
    """
    if manifest.kind.kind == "Setting":
        return _apply_setting(client, manifest, dry_run=dry_run)
    try:
        client.create(manifest.kind.plural, _create_body(manifest), dry_run=dry_run)
        return "created"
    except ApiError as error:
        if error.reason != "AlreadyExists":
            raise
    for attempt in range(1, UPDATE_ATTEMPTS + 1):
        current = client.get(manifest.kind.plural, manifest.name)
        body = _update_body(manifest, current)
        try:
            desired = client.replace(manifest.kind.plural, manifest.name, body, dry_run=True)
            if same_object(current, desired) and not _writes_hidden_fields(manifest):
                return "unchanged"
            if not dry_run:
                client.replace(manifest.kind.plural, manifest.name, body)
            return "configured"
        except ApiError as error:
            if error.reason != "Conflict" or attempt == UPDATE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def plan(client: ApiClient, manifest: Manifest) -> tuple[JsonObject | None, JsonObject]:
    """The server's object (None if it does not exist) and what ``apply`` would make of it,
    as the server would store it; nothing is written."""
    if manifest.kind.kind == "Setting":
        current = client.get("settings", manifest.name)
        return current, {**current, "spec": {**(current.get("spec") or {}), **manifest.spec}}
    try:
        found: JsonObject | None = client.get(manifest.kind.plural, manifest.name)
    except ApiError as error:
        if error.status_code != 404:
            raise
        found = None
    if found is None:
        return None, client.create(manifest.kind.plural, _create_body(manifest), dry_run=True)
    body = _update_body(manifest, found)
    return found, client.replace(manifest.kind.plural, manifest.name, body, dry_run=True)


def what_apply_writes(obj: JsonObject | None) -> JsonObject:
    """The part of an object that ``apply`` writes: kind, name, labels, annotations and spec."""
    if obj is None:
        return {}
    metadata = obj.get("metadata") or {}
    shown: JsonObject = {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": obj.get("kind")}
    shown["metadata"] = {
        key: metadata[key] for key in ("name", "labels", "annotations") if metadata.get(key) is not None
    }
    shown["spec"] = obj.get("spec") or {}
    return shown


def same_object(current: JsonObject, desired: JsonObject) -> bool:
    same: bool = what_apply_writes(current) == what_apply_writes(desired)
    return same


def _writes_hidden_fields(manifest: Manifest) -> bool:
    """A Secret's password is write-only: the server never shows it, so it cannot be compared."""
    return manifest.kind.kind == "Secret" and manifest.spec.get("password") is not None


def _create_body(manifest: Manifest) -> JsonObject:
    metadata: JsonObject = {"name": manifest.name}
    if manifest.labels is not None:
        metadata["labels"] = manifest.labels
    if manifest.annotations is not None:
        metadata["annotations"] = manifest.annotations
    return {
        "apiVersion": API_VERSION,
        "kind": manifest.kind.kind,
        "metadata": metadata,
        "spec": manifest.spec,
    }


def _update_body(manifest: Manifest, current: JsonObject) -> JsonObject:
    current_metadata = current.get("metadata") or {}
    labels = manifest.labels if manifest.labels is not None else current_metadata.get("labels") or {}
    annotations = {**(current_metadata.get("annotations") or {}), **(manifest.annotations or {})}
    return {
        "apiVersion": API_VERSION,
        "kind": manifest.kind.kind,
        "metadata": {
            "name": manifest.name,
            "labels": labels,
            "annotations": annotations,
            "resource_version": current_metadata.get("resource_version"),
        },
        "spec": manifest.spec,
    }


def _apply_setting(client: ApiClient, manifest: Manifest, *, dry_run: bool) -> str:
    if "value" not in manifest.spec:
        raise CliError("InvalidManifest", f"{manifest.source}: a Setting needs spec.value")
    value = manifest.spec["value"]
    current = client.get("settings", manifest.name)
    if (current.get("spec") or {}).get("value") == value:
        return "unchanged"
    if dry_run:
        _check_setting(manifest.name, value)
    else:
        client.patch("settings", manifest.name, {"spec": {"value": value}})
    return "configured"


def _check_setting(key: str, value: Any) -> None:
    """What the server would say of this value, from the same registry (settings take no dry run)."""
    from virtplane.domain.settings import SettingError, definition  # only for a dry run

    try:
        definition(key).parse(value)
    except SettingError as error:
        raise CliError("InvalidSetting", str(error)) from None
