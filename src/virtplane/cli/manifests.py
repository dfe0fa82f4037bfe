"""``apply``: read YAML manifests, check them locally, create or update each resource.

Update rules for a resource that exists already:

- ``spec`` is replaced by the manifest's spec (defaults filled in by the server);
- ``metadata.labels`` are replaced when the manifest has ``labels``, kept otherwise;
- ``metadata.annotations`` are merged: the manifest's keys win, others are kept,
  because the control plane records durable intents there;
- the write carries the ``resource_version`` just read, and is retried on Conflict.

A resource whose spec, labels and annotations already match is reported
``unchanged`` and not written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from virtplane.cli.client import ApiClient, ApiError, CliError, JsonObject
from virtplane.cli.kinds import KINDS, KindInfo, kind_by_name, resolve_kind
from virtplane.domain.api_version import API_VERSION

__all__ = ["Manifest", "apply_manifest", "load_manifests"]

UPDATE_ATTEMPTS = 3


@dataclass(frozen=True)
class Manifest:
    kind: KindInfo
    name: str
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    spec: JsonObject
    source: str
    """Where it came from, e.g. ``fleet.yaml document 2``."""

    @property
    def reference(self) -> str:
        return f"{self.kind.short}/{self.name}"


def load_manifests(filename: str, text: str) -> list[Manifest]:
    """Parse and check every document of one file; raise ``CliError`` naming the bad document."""
    label = "stdin" if filename == "-" else filename
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise CliError("InvalidManifest", f"{label} is not valid YAML: {error}") from error
    manifests = []
    for index, document in enumerate(documents, start=1):
        if document is None:  # an empty document, e.g. after a trailing '---'
            continue
        manifests.append(_check_document(document, f"{label} document {index}"))
    if not manifests:
        raise CliError("InvalidManifest", f"{label} contains no documents")
    return manifests


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
        source=source,
    )


def _string_map(value: Any, field: str, invalid: Callable[[str], CliError]) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(f"{field} must be a mapping")
    return {str(key): str(item) for key, item in value.items()}


def apply_manifest(client: ApiClient, manifest: Manifest) -> str:
    """Create or update one resource; return ``created``, ``configured`` or ``unchanged``."""
    if manifest.kind.kind == "Setting":
        return _apply_setting(client, manifest)
    metadata: JsonObject = {"name": manifest.name}
    if manifest.labels is not None:
        metadata["labels"] = manifest.labels
    if manifest.annotations is not None:
        metadata["annotations"] = manifest.annotations
    body: JsonObject = {"apiVersion": API_VERSION, "kind": manifest.kind.kind, "metadata": metadata}
    body["spec"] = manifest.spec
    try:
        client.create(manifest.kind.plural, body)
        return "created"
    except ApiError as error:
        if error.reason != "AlreadyExists":
            raise
    for attempt in range(1, UPDATE_ATTEMPTS + 1):
        current = client.get(manifest.kind.plural, manifest.name)
        if _matches(manifest, current):
            return "unchanged"
        try:
            client.replace(manifest.kind.plural, manifest.name, _update_body(manifest, current))
            return "configured"
        except ApiError as error:
            if error.reason != "Conflict" or attempt == UPDATE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


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


def _matches(manifest: Manifest, current: JsonObject) -> bool:
    current_metadata = current.get("metadata") or {}
    if manifest.labels is not None and manifest.labels != (current_metadata.get("labels") or {}):
        return False
    current_annotations = current_metadata.get("annotations") or {}
    if any(current_annotations.get(k) != v for k, v in (manifest.annotations or {}).items()):
        return False
    current_spec = current.get("spec") or {}
    wanted_spec = _with_defaults(manifest)
    if wanted_spec is None:  # the local models reject it: compare what the manifest says
        return _is_subset(manifest.spec, current_spec)
    same: bool = _without_nulls(wanted_spec) == _without_nulls(current_spec)
    return same


def _with_defaults(manifest: Manifest) -> JsonObject | None:
    """The manifest's spec as the server stores it (defaults filled), or None if it is invalid."""
    from virtplane.domain.resources import KIND_BY_NAME  # the models: only where a spec is checked

    model = KIND_BY_NAME.get(manifest.kind.kind)
    if model is None:
        return None
    try:
        resource = model.model_validate({"metadata": {"name": manifest.name}, "spec": manifest.spec})
    except ValueError:  # pydantic's ValidationError; the server will report it properly
        return None
    spec: Any = resource.model_dump(mode="json").get("spec")
    return spec if isinstance(spec, dict) else None


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _is_subset(wanted: Any, actual: Any) -> bool:
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            k in actual and _is_subset(v, actual[k]) for k, v in wanted.items()
        )
    equal: bool = wanted == actual
    return equal


def _apply_setting(client: ApiClient, manifest: Manifest) -> str:
    if "value" not in manifest.spec:
        raise CliError("InvalidManifest", f"{manifest.source}: a Setting needs spec.value")
    value = manifest.spec["value"]
    current = client.get("settings", manifest.name)
    if (current.get("spec") or {}).get("value") == value:
        return "unchanged"
    client.patch("settings", manifest.name, {"spec": {"value": value}})
    return "configured"
