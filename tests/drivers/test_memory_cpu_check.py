"""A memory restore's definition takes the CPU check the saved image has (libvirt refuses a
restore whose check differs: the real-QEMU memory test booted cold without it)."""

from __future__ import annotations

from virtplane.drivers.libvirt.memory import with_saved_cpu_check

DEFINITION = (
    "<domain type='kvm'><cpu mode='custom' match='exact'><model fallback='forbid'>EPYC</model></cpu></domain>"
)


def test_the_saved_check_is_taken_and_nothing_else() -> None:
    saved = "<domain><cpu mode='custom' match='exact' check='full'><model>Other</model></cpu></domain>"
    restored = with_saved_cpu_check(DEFINITION, saved)
    assert 'check="full"' in restored and ">EPYC</model>" in restored


def test_without_a_saved_check_the_definition_is_kept() -> None:
    assert with_saved_cpu_check(DEFINITION, "<domain><cpu mode='custom'/></domain>") == DEFINITION
    assert with_saved_cpu_check(DEFINITION, "<domain/>") == DEFINITION
