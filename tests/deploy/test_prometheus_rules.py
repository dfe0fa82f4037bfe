"""deploy/prometheus: the alert rules pass ``promtool check rules``, their unit tests
(deploy/prometheus/tests/*.yml) pass ``promtool test rules`` and cover every rule both firing
and silent, and what /metrics serves passes ``promtool check metrics``."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import eventually
from tests.crash.server import ServerProcess
from tests.deploy.tools import ALERT_RULES, RULE_TESTS, tool_or_skip
from tests.test_metrics import replica


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool_or_skip("promtool", "prometheus"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def alert_names() -> list[str]:
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    checked = promtool("check", "rules", str(ALERT_RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in checked.stdout


def test_the_unit_tests_of_the_rules_pass_promtool_test_rules() -> None:
    assert RULE_TESTS, "deploy/prometheus/tests/*.yml"
    tested = promtool("test", "rules", *map(str, RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert tested.stdout.count("SUCCESS") == len(RULE_TESTS), tested.stdout


def test_every_rule_has_a_unit_test_where_it_fires_and_one_where_it_stays_silent() -> None:
    firing: dict[str, int] = defaultdict(int)
    silent: dict[str, int] = defaultdict(int)
    for path in RULE_TESTS:
        document: dict[str, Any] = yaml.safe_load(path.read_text())
        assert document["rule_files"] == ["../alerts.yml"], f"{path.name} tests the shipped rules"
        for test in document["tests"]:
            for check in test.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else silent)[check["alertname"]] += 1
    names = alert_names()
    assert len(names) >= 7, names
    assert not [n for n in names if not firing[n]], "rules never seen firing"
    assert not [n for n in names if not silent[n]], "rules never seen silent"
    assert set(firing) | set(silent) <= set(names), "tests of rules that do not exist"


def test_the_metrics_of_serve_demo_pass_promtool_check_metrics(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", demo=True)
    server.start()
    try:
        server.wait_for("/v1/vms/web-1", lambda vm: vm["status"]["phase"] == "Running")
        with server.client() as client:
            text = client.get("/metrics").text
    finally:
        server.stop()
    for family in (
        "reconcile_total",
        "virtplane_vm_in_desired_power_state",
        "virtplane_host_resource_state",
        "virtplane_host_connection",
        "virtplane_migrations_total",
    ):
        assert f"# TYPE {family} " in text, family
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_the_leadership_metrics_of_a_replica_pass_promtool_check_metrics(tmp_path: Path) -> None:
    plane = replica(tmp_path / "store.db", "r1")
    try:
        await plane.start()
        await eventually(lambda: plane.elector is not None and plane.elector.is_leader)
        transport = httpx.ASGITransport(app=plane.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://virtplane") as client:
            token = plane.store.create_token("scrape", "viewer")
            text = (await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})).text
    finally:
        await plane.stop()
        plane.store.close()
    assert "# TYPE virtplane_leader gauge" in text and "virtplane_leader_acquisitions_total" in text
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
