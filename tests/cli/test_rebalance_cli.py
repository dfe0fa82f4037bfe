"""``virtplane rebalance show|plan|apply`` against the live server (issue 37): two VMs on node-1,
node-2 empty; balancing allocation only (the live server's usage is not the test's)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import LiveServer, eventually_sync
from virtplane.cli.exit_codes import ExitCode
from virtplane.domain.resources import (
    Metadata,
    PlacementRule,
    PlacementRuleSpec,
    RuleType,
    RunPolicy,
    VirtualMachine,
)

from .conftest import Invoke, RecordingTransport, add_host, add_vm, wait_phase


@pytest.fixture(autouse=True)
def world(server: LiveServer) -> None:
    add_host(server, "node-1", vcpus=8, memory_mib=16384)
    for name in ("web-1", "web-2"):
        add_vm(server, name, RunPolicy.ALWAYS_ON, cpu=4, memory_mib=4096)
        wait_phase(server, name, "Running")
    add_host(server, "node-2", vcpus=8, memory_mib=16384)
    server.plane.settings.set("rebalance.real_use_weight", 0.0, cluster="default")


def hosts_of(server: LiveServer) -> list[str | None]:
    return sorted(server.store.get(VirtualMachine, n).status.host for n in ("web-1", "web-2"))  # type: ignore[type-var]


def test_show_prints_each_hosts_load_and_the_plan(invoke: Invoke) -> None:
    result = invoke("rebalance", "show", role="viewer")
    assert result.exit_code == 0, result.output
    assert "cluster default: mode off" in result.output
    # 8 of its 32 allocatable vCPUs (ratio 4) and half its memory: (0.25 + 0.5) / 2
    assert "node-1  0.375" in result.output
    assert "1 move(s)" in result.output


def test_plan_asks_for_a_dry_run_and_moves_nothing(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("rebalance", "plan", "-o", "json")
    assert result.exit_code == 0, result.output
    [move] = json.loads(result.output)["plan"]["moves"]
    assert (move["source"], move["target"]) == ("node-1", "node-2")
    [request] = sent.to("POST", "/v1/clusters/default/rebalance")
    assert request.params == {"dryRun": "true"}
    assert hosts_of(server) == ["node-1", "node-1"]


def test_apply_moves_a_vm_live_and_an_operator_may_not(invoke: Invoke, server: LiveServer) -> None:
    refused = invoke("rebalance", "apply", role="operator")
    assert refused.exit_code == ExitCode.DENIED, refused.output
    result = invoke("rebalance", "apply")
    assert result.exit_code == 0, result.output
    assert "started: web-" in result.output
    eventually_sync(lambda: hosts_of(server) == ["node-1", "node-2"])


def test_plan_shows_a_repair_move_with_the_rule_it_repairs(invoke: Invoke, server: LiveServer) -> None:
    """A required anti-affinity rule added while web-1 and web-2 share node-1: the plan's move
    says it repairs the rule. Red with the rebalancer blind to placement rules (WHY: balance)."""

    def label(vm: VirtualMachine) -> None:
        vm.metadata.labels = {**vm.metadata.labels, "app": "web"}

    for name in ("web-1", "web-2"):
        server.store.mutate(VirtualMachine, name, label)
    server.store.create(
        PlacementRule(
            metadata=Metadata(name="web-apart"),
            spec=PlacementRuleSpec(type=RuleType.ANTI_AFFINITY, vm_selector="app=web"),
        )
    )
    eventually_sync(lambda: len(server.plane.cache.objects(PlacementRule)) == 1)
    eventually_sync(lambda: server.plane.cache.vm("web-2").metadata.labels.get("app") == "web")
    result = invoke("rebalance", "plan", "-o", "json")
    assert result.exit_code == 0, result.output
    [move] = json.loads(result.output)["plan"]["moves"]
    assert move["reason"] == "repair: required rule web-apart: 1 other VM it keeps apart already there"
    shown = invoke("rebalance", "show", role="viewer")
    assert "repair: required rule web-apart" in " ".join(shown.output.split())  # WHY may wrap
