"""`virtplane token create|list|revoke` against a live server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import typer

from tests.cli.conftest import Invoke
from tests.conftest import LiveServer
from virtplane.cli.tokens import parse_duration_s


def test_create_list_and_revoke(invoke: Invoke, server: LiveServer) -> None:
    created = invoke(
        "token", "create", "ci", "--role", "operator", "--owner", "svc-ci",
        "--description", "the CI job", "--expires-in", "30d", "-o", "json",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    body = json.loads(created.stdout)
    expires = datetime.fromisoformat(body["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)
    secret = body["token"]

    listed = invoke("token", "list")
    assert listed.exit_code == 0, listed.output
    line = next(line for line in listed.stdout.splitlines() if line.startswith("ci "))
    assert "operator" in line and "svc-ci" in line and "Active" in line and "the CI job" in line
    assert secret not in listed.stdout

    revoked = invoke("token", "revoke", "ci")
    assert revoked.exit_code == 0 and "token ci revoked" in revoked.stdout
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {secret}"}) as client:
        refused = client.get("/v1/vms")
    assert refused.status_code == 401 and refused.json()["reason"] == "TokenRevoked"
    assert "Revoked" in next(
        line for line in invoke("token", "list").stdout.splitlines() if line.startswith("ci ")
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("12h", 43200), ("30d", 2592000), ("2W", 1209600)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["30", "0d", "-1d", "1y", "1.5h", "30dx", "d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_duration_s(text)
