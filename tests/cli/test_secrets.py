"""A Secret through the CLI (issue 15): ``get`` and ``describe`` show that a password is set,
never the password (the server leaves it out of every answer; this is the user's view of it)."""

from __future__ import annotations

from tests.cli.conftest import Invoke
from tests.conftest import LiveServer
from virtplane.domain.resources import Metadata, Secret, SecretSpec

PASSWORD = "s3cret-Pa55-never-shown"


def test_get_and_describe_never_show_the_password(invoke: Invoke, server: LiveServer) -> None:
    server.store.create(
        Secret(metadata=Metadata(name="bmc-h1"), spec=SecretSpec(username="root", password=PASSWORD))
    )
    results = {
        args: invoke(*args)
        for args in (
            ("describe", "secret", "bmc-h1"),
            ("get", "secrets"),
            ("get", "secrets", "-o", "json"),
            ("get", "secret", "bmc-h1", "-o", "yaml"),
        )
    }
    for args, result in results.items():
        assert result.exit_code == 0, (args, result.output)
        assert PASSWORD not in result.output, f"virtplane {' '.join(args)} shows the password"
    described = results["describe", "secret", "bmc-h1"].stdout
    assert "username: root" in described and "password_set: true" in described, described
