"""An in-memory stand-in for the virtplane REST API, served through ``httpx.MockTransport``.

It follows the API contract the CLI is built against (``/v1/{plural}`` CRUD with
resource versions, events, settings, host maintenance, faults, tokens) closely
enough to test the CLI's requests and its rendering of answers, and it records
every request. Resources are stored through the real domain models, so
defaults are filled in the way the server does.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx

from virtplane.domain.resources import KIND_BY_PLURAL

JsonObject = dict[str, Any]


def error(status: int, reason: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"reason": reason, "message": message})


@dataclass
class RecordedRequest:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeServer:
    resources: dict[str, dict[str, JsonObject]] = field(default_factory=lambda: defaultdict(dict))
    events: list[JsonObject] = field(default_factory=list)
    requests: list[RecordedRequest] = field(default_factory=list)
    operation_statuses: list[JsonObject] = field(default_factory=list)
    """Statuses a new operation reports on its 1st, 2nd, ... GET; the last one repeats."""
    snapshot_statuses: list[JsonObject] = field(default_factory=list)
    host_states: list[str] = field(default_factory=list)
    """resource_state values a host in maintenance reports on successive GETs."""
    maintenance: dict[str, JsonObject] = field(default_factory=dict)
    overrides: dict[tuple[str, str], httpx.Response] = field(default_factory=dict)
    """A canned answer for (METHOD, path), e.g. an error."""
    conflicts_left: int = 0
    """How many PUTs to refuse with a Conflict before accepting."""
    _reads: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _next_version: int = 1

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # ------------------------------------------------------------------ seeding

    def add(self, plural: str, resource: JsonObject) -> JsonObject:
        stored = self._normalize(plural, resource)
        stored["metadata"]["resource_version"] = self._bump()
        stored["metadata"].setdefault("created_at", "2024-01-01T00:00:00+00:00")
        self.resources[plural][stored["metadata"]["name"]] = stored
        return stored

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]

    # ------------------------------------------------------------------ dispatch

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path
        self.requests.append(
            RecordedRequest(request.method, path, dict(request.url.params), dict(request.headers), body)
        )
        if (request.method, path) in self.overrides:
            return self.overrides[(request.method, path)]
        parts = path.strip("/").split("/")
        if parts[0] != "v1" or len(parts) < 2:
            return error(404, "NotFound", f"no route {path}")
        plural, rest = parts[1], parts[2:]
        if plural == "events":
            return self._events(request)
        if plural == "tokens" and request.method == "POST":
            return httpx.Response(201, json={**body, "token": "tok-123"})
        if plural == "hosts" and len(rest) == 2:
            return self._host_subresource(request.method, rest[0], rest[1], body)
        if plural not in KIND_BY_PLURAL:
            return error(404, "NotFound", f"no route {path}")
        if not rest:
            if request.method == "GET":
                return httpx.Response(200, json={"items": list(self.resources[plural].values())})
            if request.method == "POST":
                return self._create(plural, body)
        elif len(rest) == 1:
            name = rest[0]
            if name not in self.resources[plural]:
                return error(404, "NotFound", f"{plural}/{name} not found")
            if request.method == "GET":
                return httpx.Response(200, json=self._read(plural, name))
            if request.method == "PUT":
                return self._replace(plural, name, body)
            if request.method == "PATCH":
                return self._patch(plural, name, body)
            if request.method == "DELETE":
                del self.resources[plural][name]
                return httpx.Response(200, json={"reason": "Deleted", "message": f"{name} deleted"})
        return error(405, "MethodNotAllowed", f"{request.method} {path}")

    # ------------------------------------------------------------------ resources

    def _bump(self) -> int:
        self._next_version += 1
        return self._next_version

    def _normalize(self, plural: str, resource: JsonObject) -> JsonObject:
        model = KIND_BY_PLURAL[plural]
        return model.model_validate(resource).model_dump(mode="json")

    def _create(self, plural: str, body: JsonObject) -> httpx.Response:
        name = body["metadata"]["name"]
        if name in self.resources[plural]:
            return error(409, "AlreadyExists", f"{plural}/{name} already exists")
        try:
            stored = self.add(plural, body)
        except ValueError as invalid:
            return error(422, "Invalid", str(invalid).splitlines()[0])
        return httpx.Response(201, json=stored)

    def _replace(self, plural: str, name: str, body: JsonObject) -> httpx.Response:
        current = self.resources[plural][name]
        expected = body["metadata"].get("resource_version")
        if self.conflicts_left > 0 or (
            expected is not None and expected != current["metadata"]["resource_version"]
        ):
            self.conflicts_left = max(0, self.conflicts_left - 1)
            current["metadata"]["resource_version"] = self._bump()  # someone else wrote it
            return error(409, "Conflict", f"{plural}/{name} was modified; re-read and retry")
        updated = self._normalize(
            plural,
            {
                "kind": current["kind"],
                "metadata": {**current["metadata"], **body["metadata"]},
                "spec": body["spec"],
                "status": current["status"],
            },
        )
        updated["metadata"]["resource_version"] = self._bump()
        updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
        self.resources[plural][name] = updated
        return httpx.Response(200, json=updated)

    def _patch(self, plural: str, name: str, body: JsonObject) -> httpx.Response:
        current = self.resources[plural][name]
        merged = _merge_patch(current, body)
        merged["metadata"]["resource_version"] = self._bump()
        self.resources[plural][name] = merged
        return httpx.Response(200, json=merged)

    def _read(self, plural: str, name: str) -> JsonObject:
        resource = self.resources[plural][name]
        script = {"operations": self.operation_statuses, "snapshots": self.snapshot_statuses}.get(plural)
        if script:
            index = min(self._reads[f"{plural}/{name}"], len(script) - 1)
            self._reads[f"{plural}/{name}"] += 1
            resource["status"] = {**resource["status"], **script[index]}
        if plural == "hosts" and self.host_states and name in self.maintenance:
            index = min(self._reads[f"hosts/{name}"], len(self.host_states) - 1)
            self._reads[f"hosts/{name}"] += 1
            resource["status"]["resource_state"] = self.host_states[index]
        return resource

    # ------------------------------------------------------------------ the rest

    def _events(self, request: httpx.Request) -> httpx.Response:
        kind = request.url.params.get("kind")
        name = request.url.params.get("name")
        limit = int(request.url.params.get("limit", "50"))
        items = [
            e for e in self.events if (not kind or e["kind"] == kind) and (not name or e["name"] == name)
        ]
        return httpx.Response(200, json={"items": items[-limit:]})

    def _host_subresource(self, method: str, host: str, sub: str, body: Any) -> httpx.Response:
        if host not in self.resources["hosts"]:
            return error(404, "NotFound", f"hosts/{host} not found")
        if sub == "faults" and method == "POST":
            return httpx.Response(200, json={"host": host, **body})
        if sub != "maintenance":
            return error(404, "NotFound", f"no route hosts/{host}/{sub}")
        if method == "POST":
            plan = {
                "items": [
                    {"vm": "web-1", "action": "Migrate", "target": "node-2", "reason": "shared storage"}
                ]
            }
            self.maintenance[host] = {
                "host": host,
                "strategy": body["strategy"],
                "dry_run": body["dry_run"],
                "phase": "Planned" if body["dry_run"] else "InProgress",
                "plan": plan,
                "progress": {},
                "message": "",
            }
            return httpx.Response(200, json=self.maintenance[host])
        if host not in self.maintenance:
            return error(404, "NotFound", f"host {host} is not in maintenance")
        if method == "GET":
            return httpx.Response(200, json=self.maintenance[host])
        if method == "DELETE":
            return httpx.Response(200, json=self.maintenance.pop(host))
        return error(405, "MethodNotAllowed", method)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result
