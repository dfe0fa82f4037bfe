"""What each new VM gets, as tables: plan_vms over a template's spec, and the checks of a source."""

from __future__ import annotations

from typing import Any

import pytest

from virtplane.domain.base import Metadata
from virtplane.domain.clones import (
    CLONED_FROM,
    CopySource,
    NewVolume,
    check_template_change,
    clone_source_refusal,
    plan_vms,
    template_volumes,
)
from virtplane.domain.errors import Invalid, Refused
from virtplane.domain.names import BATCH_LABEL
from virtplane.domain.resources import (
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumePhase,
    VolumeSpec,
)

TEMPLATE_SPEC: dict[str, Any] = {
    "run_policy": "AlwaysOff",
    "template": True,
    "cpu": 2,
    "memory_mib": 2048,
    "disks": [{"volume": "gold-root", "boot_order": 1}, {"volume": "data", "boot_order": None}],
    "nics": [{"network": "lan", "mac": "52:54:00:00:00:01", "ip": "10.0.0.5"}],
    "cloud_init": {"ssh_authorized_keys": ["ssh-ed25519 AAAA k"]},
}


def _vm(name: str, phase: VMPhase = VMPhase.STOPPED, **spec: Any) -> VirtualMachine:
    vm = VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec.model_validate(spec))
    vm.status.phase = phase
    return vm


def _volume(name: str, size: int = 4, phase: VolumePhase = VolumePhase.READY) -> Volume:
    volume = Volume(metadata=Metadata(name=name), spec=VolumeSpec(pool="shared", size_gib=size))
    volume.status.phase = phase
    volume.status.size_gib = size
    return volume


def test_each_new_vm_gets_its_own_copies_and_nothing_that_identifies_the_template() -> None:
    template = _vm("gold", **TEMPLATE_SPEC)
    copies = template_volumes(template, {"gold-root": _volume("gold-root", 8), "data": _volume("data", 2)})
    assert [(c.suffix, c.spec.source.volume, c.spec.size_gib, c.boot_order) for c in copies] == [  # type: ignore[union-attr]
        ("root", "gold-root", 8, 1),
        ("disk1", "data", 2, None),  # a volume not named after the VM
    ]
    planned = plan_vms(
        ["web-1", "web-2"],
        spec_patch={"cpu": 4, "memory_mib": "8Gi"},
        new_volumes=copies,
        labels={"app": "web"},
        batch="b1",
        source=CopySource("gold", template.spec),
        run_policy=RunPolicy.ALWAYS_ON,
    )
    for plan, name in zip(planned, ["web-1", "web-2"], strict=True):
        spec = plan.vm.spec
        assert (spec.cpu, spec.memory_mib, spec.run_policy, spec.template) == (
            4,
            8192,
            RunPolicy.ALWAYS_ON,
            False,
        )
        assert [(n.network, n.mac, n.ip) for n in spec.nics] == [("lan", None, None)]
        assert spec.cloud_init == template.spec.cloud_init
        assert [(d.volume, d.boot_order) for d in spec.disks] == [
            (f"{name}-root", 1),
            (f"{name}-disk1", None),
        ]
        assert [v.metadata.name for v in plan.volumes] == [f"{name}-root", f"{name}-disk1"]
        assert plan.vm.metadata.labels == {"app": "web", CLONED_FROM: "gold", BATCH_LABEL: "b1"}
        assert plan.vm.metadata.annotations == {}
        assert all(v.metadata.labels == {"app": "web", BATCH_LABEL: "b1"} for v in plan.volumes)


@pytest.mark.parametrize(
    ("names", "patch", "volumes", "words"),
    [
        (["a"], {"cpu": 0}, [], "VM a: spec.cpu: Input should be greater than or equal to 1"),
        (["a"], {"memory": "4GB"}, [], "not a whole number of MiB"),
        (["a"], {"colour": "blue"}, [], "spec.colour: Extra inputs are not permitted"),
        (["x" * 60], {}, [NewVolume("root", VolumeSpec(pool="p", size_gib=1))], "no DNS label"),
    ],
)
def test_a_spec_that_is_no_spec_is_invalid_with_the_field(
    names: list[str], patch: dict[str, Any], volumes: list[NewVolume], words: str
) -> None:
    with pytest.raises(Invalid) as refused:
        plan_vms(names, spec_patch=patch, new_volumes=volumes, labels={}, batch="b")
    assert words in refused.value.message


@pytest.mark.parametrize(
    ("template", "volumes", "reason"),
    [
        (_vm("t", VMPhase.STOPPED, disks=[{"volume": "r"}]), {"r": _volume("r")}, None),
        (_vm("t", VMPhase.RUNNING, disks=[{"volume": "r"}]), {"r": _volume("r")}, "SourceNotStopped"),
        (_vm("t", VMPhase.STOPPED, disks=[{"volume": "r"}]), {"r": None}, "VolumeNotFound"),
        (
            _vm("t", VMPhase.STOPPED, disks=[{"volume": "r"}]),
            {"r": _volume("r", phase=VolumePhase.PENDING)},
            "VolumeNotReady",
        ),
    ],
)
def test_what_can_be_copied(
    template: VirtualMachine, volumes: dict[str, Volume | None], reason: str | None
) -> None:
    refusal = clone_source_refusal(template, volumes)
    assert (refusal.reason if refusal else None) == reason


@pytest.mark.parametrize(
    ("current_phase", "policy", "error"),
    [
        (VMPhase.STOPPED, RunPolicy.ALWAYS_OFF, None),
        (VMPhase.STOPPED, RunPolicy.MANUAL, "TemplateRuns"),
        (VMPhase.RUNNING, RunPolicy.ALWAYS_OFF, "NotStopped"),
        (None, RunPolicy.ALWAYS_OFF, None),  # created a template: it never ran
    ],
)
def test_a_template_never_runs(current_phase: VMPhase | None, policy: RunPolicy, error: str | None) -> None:
    current = _vm("t", current_phase) if current_phase else None
    new = _vm("t", run_policy=policy.value, template=True)
    if error is None:
        check_template_change(current, new)
    else:
        with pytest.raises((Invalid, Refused)) as refused:
            check_template_change(current, new)
        assert refused.value.reason == error  # type: ignore[union-attr]
