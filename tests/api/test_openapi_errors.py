"""The OpenAPI document lists the 401, 403, 404, 409 and 422 answers of every operation that
can give them, with the {reason, message} body; and the 401s and 403s it lists are what the
running app answers."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import LiveServer
from virtplane.api.openapi_errors import ANY_ROLE, TOKEN_FREE, WRITE_METHODS

ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}


@pytest.fixture
def document(live_server: LiveServer) -> dict[str, Any]:
    with live_server.client(None) as client:
        found: dict[str, Any] = client.get("/openapi.json").json()
    return found


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, operations in document["paths"].items()
        if path.startswith("/v1/")
        for method, operation in operations.items()
    ]


def test_every_operation_documents_the_errors_it_can_answer(document: dict[str, Any]) -> None:
    operations = _operations(document)
    assert len(operations) > 40
    missing = []
    for path, method, operation in operations:
        wanted = {"401"}
        if (method, path) in TOKEN_FREE:
            wanted = {"401", "403", "429", "503"}
        elif (method, path) in ANY_ROLE:
            wanted.add("409")
        elif method in WRITE_METHODS:
            wanted |= {"403", "409"}
        if "{" in path:
            wanted.add("404")
        if operation.get("parameters") or operation.get("requestBody"):
            wanted.add("422")
        responses = operation["responses"]
        missing += [f"{method.upper()} {path} {status}" for status in sorted(wanted - set(responses))]
        missing += [
            f"{method.upper()} {path} {status} body"
            for status in wanted & set(responses)
            if responses[status].get("content") != ERROR_BODY
        ]
    assert missing == []
    assert document["components"]["schemas"]["ErrorBody"]["required"] == ["reason", "message"]
    every = {status for _, _, operation in operations for status in operation["responses"]}
    assert {"401", "403", "404", "409", "422"} <= every


def test_the_lists_own_422_description_is_kept(document: dict[str, Any]) -> None:
    assert "selector" in document["paths"]["/v1/vms"]["get"]["responses"]["422"]["description"]


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "some-name", path)


def test_the_documented_401s_and_403s_are_what_the_app_answers(
    live_server: LiveServer, document: dict[str, Any]
) -> None:
    """No token: 401 on every /v1 operation; a viewer's token: 403 on every write (before the
    body is read, so an empty one does). The login, which needs no token, aside."""
    wrong = []
    with live_server.client(None) as anonymous, live_server.client("viewer") as viewer:
        for path, method, operation in _operations(document):
            url = _concrete(path)
            if (method, path) in TOKEN_FREE:
                continue
            if "401" in operation["responses"]:
                got = anonymous.request(method, url, json={}).status_code
                wrong += [f"{method.upper()} {path}: {got} without a token"] if got != 401 else []
            if "403" in operation["responses"]:
                got = viewer.request(method, url, json={}).status_code
                wrong += [f"{method.upper()} {path}: {got} for a viewer"] if got != 403 else []
    assert wrong == []
