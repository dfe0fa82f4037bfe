"""A request is matched against each route once (issue 13, row 1: route matching was ~5 % of a
POST). FastAPI matches an included router's routes once to choose the router and again to
choose the route; the resource routes are the app's own, so they are tried once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import routing
from starlette.types import Scope

from virtplane.api.app import create_app
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.store.store import Store, sqlite_url


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/volumes"), ("GET", "/v1/vms"), ("GET", "/v1/vms/missing"), ("DELETE", "/v1/hosts/h")],
)
async def test_a_request_tries_each_resource_route_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, path: str
) -> None:
    store = Store(sqlite_url(tmp_path / "db.sqlite"))
    store.migrate()
    plane = ControlPlane(store, options=ControlPlaneOptions(feed_poll_s=3600))
    plane.cache.load()
    token = store.create_token("admin", "admin")
    tried: Counter[str] = Counter()
    matches = routing.APIRoute.matches

    def counted(route: routing.APIRoute, scope: Scope) -> Any:
        tried[f"{sorted(route.methods)} {route.path}"] += 1
        return matches(route, scope)

    monkeypatch.setattr(routing.APIRoute, "matches", counted)
    body = {"metadata": {"name": "v"}, "spec": {"pool": "none", "size_gib": 1}}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(plane.api_context)),
        base_url="http://api",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        response = await client.request(method, path, json=body if method == "POST" else None)
    store.close()
    assert response.status_code < 500, response.text
    assert max(tried.values()) == 1, {route: n for route, n in tried.items() if n > 1}
