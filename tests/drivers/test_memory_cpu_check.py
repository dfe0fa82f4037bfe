"""A memory restore's definition takes the CPU check the saved image has (libvirt refuses a
restore whose check differs: the real-QEMU memory test booted cold without it)."""

from __future__ import annotations

from virtplane.drivers.libvirt.memory import with_saved_agent_channel, with_saved_cpu_check

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


AGENT = "<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>"
WITH_AGENT = f"<domain><devices><serial type='pty'/>{AGENT}</devices></domain>"


def test_an_image_saved_before_the_agent_channel_is_restored_without_it() -> None:
    saved_before = "<domain><devices><serial type='pty'/></devices></domain>"
    restored = with_saved_agent_channel(WITH_AGENT, saved_before)
    assert "guest_agent" not in restored and "serial" in restored
    assert with_saved_agent_channel(WITH_AGENT, WITH_AGENT) == WITH_AGENT  # saved with it: kept
