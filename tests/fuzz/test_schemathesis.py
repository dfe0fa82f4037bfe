"""Property fuzzing of the whole API from its own OpenAPI document, against the live server.

schemathesis generates valid and invalid requests for every operation (its examples,
coverage and fuzzing phases). Whatever comes in, the API answers without a 5xx, and
every error is JSON ``{"reason": ..., "message": ...}`` with both non-empty.

Most generated names are not DNS labels, and would never get past validation; so a
hook rewrites half of the cases to use a few real-looking names (``fz-0`` … ``fz-3``)
for the path, ``metadata.name`` and the references, which lets creates succeed and
later reads, replaces, patches, operations and deletes find the objects.

``VIRTPLANE_FUZZ_EXAMPLES`` (default 25) is Hypothesis' max_examples per operation.
"""

from __future__ import annotations

import os
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig

from tests.conftest import LiveServer
from tests.fuzz.conftest import Figures
from virtplane.api.app import create_app
from virtplane.api.context import ApiContext

EXAMPLES = int(os.environ.get("VIRTPLANE_FUZZ_EXAMPLES", "25"))
VIEWER_EXAMPLES = max(5, EXAMPLES // 3)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# The document is the app's own; test_document_is_the_live_one checks that the live server serves it.
OPENAPI = create_app(ApiContext(store=cast(Any, None), settings=cast(Any, None))).openapi()
schema = schemathesis.openapi.from_dict(OPENAPI)
# the viewer's pass is the smaller one: no coverage phase (its boundary values mostly meet a 403 anyway)
viewer_schema = schemathesis.openapi.from_dict(
    OPENAPI, config=SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}})
)

NAMES = [f"fz-{i}" for i in range(4)]
REFERENCE_KEYS = frozenset({"name", "vm", "pool", "host", "snapshot", "target_host", "volume"})


def _with_names(value: Any, pick: list[str]) -> Any:
    """``value`` with the strings at name and reference keys replaced by names from ``pick``."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in REFERENCE_KEYS and isinstance(item, str):
                out[key] = pick[len(out) % len(pick)]
            else:
                out[key] = _with_names(item, pick)
        return out
    if isinstance(value, list):
        return [_with_names(item, pick) for item in value]
    return value


WATCH_TIMEOUT_S = 0.2
"""A watch streams until its timeout: generated ones end quickly."""


def bounded(case: Any) -> Any:
    """``case``, with a short timeout if it may be a watch (every phase: examples, coverage, fuzzing)."""
    if isinstance(case.query, dict) and "watch" in case.query:
        case.query = {**case.query, "timeout_s": WATCH_TIMEOUT_S}
    return case


def flatmap_case(context: Any, case: Any) -> Any:
    def rewrite(pick: list[str]) -> Any:
        if case.path_parameters and "name" in case.path_parameters:
            case.path_parameters = {**case.path_parameters, "name": pick[0]}
        if isinstance(case.body, dict):
            case.body = _with_names(case.body, pick)
        return case

    same_names = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)
    return st.one_of(st.just(case), same_names.map(rewrite))


schema.hook(flatmap_case)
viewer_schema.hook(flatmap_case)


# uvicorn's HTTP parser (httptools) takes a request target of at most 65,534 bytes; a longer
# one is refused before the app sees it: 400 "Invalid HTTP request received." in plain text
# (h11, before it, refused at about 256 KiB). The fuzzer's longest strings get there.
REQUEST_TARGET_LIMIT = 65_534


def _request_target(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def check_response(case: Any, response: Any) -> None:
    # a backup's answer is binary: the text is only for the message
    text = response.content[:300].decode("utf-8", "replace")
    where = f"{case.method} {case.formatted_path} -> {response.status_code}: {text}"
    assert response.status_code < 500, where
    if response.status_code < 400:
        return
    if len(_request_target(response.request.url)) > REQUEST_TARGET_LIMIT:
        assert response.status_code == 400, where
        return
    assert response.headers.get("content-type", [""])[0].startswith("application/json"), where
    body = response.json()
    assert isinstance(body, dict), where
    assert isinstance(body.get("reason"), str) and body["reason"], where
    assert isinstance(body.get("message"), str) and body["message"], where
    if response.status_code == 405:
        assert response.headers.get("allow"), where


def test_document_is_the_live_one(shared_server: LiveServer) -> None:
    assert httpx.get(f"{shared_server.url}/openapi.json").json() == OPENAPI


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_as_admin(case: Any, shared_server: LiveServer, figures: Figures) -> None:
    response = bounded(case).call(
        base_url=shared_server.url,
        headers={"Authorization": f"Bearer {shared_server.tokens['admin']}"},
        timeout=30,
    )
    figures.add("generated.admin")
    if 200 <= response.status_code < 300:
        figures.add("accepted.admin")
    check_response(case, response)


@viewer_schema.parametrize()
@settings(max_examples=VIEWER_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_as_viewer(case: Any, shared_server: LiveServer, figures: Figures) -> None:
    response = bounded(case).call(
        base_url=shared_server.url,
        headers={"Authorization": f"Bearer {shared_server.tokens['viewer']}"},
        timeout=30,
    )
    figures.add("generated.viewer")
    check_response(case, response)
    if case.method.upper() in WRITE_METHODS:
        assert not 200 <= response.status_code < 300, f"viewer wrote: {case.method} {case.formatted_path}"
