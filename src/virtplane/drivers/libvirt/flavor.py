"""What differs between libvirt's test driver and a real hypervisor, as one value chosen from the URI.

libvirt's ``test:///`` driver needs no daemon and runs inside this process with its
domains and volumes in memory, so the contract suite and the controllers' tests run on
it everywhere. It lacks some of what QEMU has; every such difference is a field of
``HypervisorFlavor``, and the driver asks the flavor rather than the URI.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from virtplane.drivers.base import Capability
from virtplane.drivers.libvirt.display_ssh import is_ssh
from virtplane.drivers.libvirt.domain_xml import TEST_DRIVER_OPTIONS, XmlOptions


@dataclass(frozen=True)
class HypervisorFlavor:
    capabilities: frozenset[Capability]
    xml: XmlOptions
    power_button: bool
    """``shutdown`` presses the ACPI power button; the test driver has only its plain shutdown."""
    undefine_checkpoints: bool
    """``undefine`` may drop checkpoint metadata (the test driver refuses the flag)."""
    live_backup: bool
    """A disk of a running guest is copied by a backup job; else it is cloned as it is."""
    restore_run_state: bool
    """A restore of a memory image is told to bring the guest back paused or running
    (``VIR_DOMAIN_SAVE_PAUSED`` / ``_RUNNING``), whatever it was saved as; the test driver
    takes no flags and always runs it, so a guest saved paused is suspended again after."""
    memory_on_host: bool
    """Memory images go to a directory pool on the host; the test driver, running in this
    process, writes them to a directory on this machine."""
    restore_with_definition: bool
    """Restoring memory passes the domain's current definition along with the image."""
    local_view: bool
    """Library files are checked on this machine's filesystem too (``images``); the test
    driver's volumes exist only in its memory."""
    volume_streams: bool
    """Volumes are written and read over the connection (upload, download); the test driver
    keeps no volume contents, so an uploaded volume is only made there."""
    agent_channel: bool
    """Whether the guest's agent is connected is read from its channel's state; the test driver
    has no agents but answers agent calls (addresses, freeze) for any running domain itself."""
    agent_shutdown: bool
    """The guest's agent can shut it down (the test driver refuses the flag)."""


QEMU = HypervisorFlavor(
    capabilities=frozenset(
        {
            Capability.LIVE_MIGRATION,
            Capability.BLOCK_MIGRATION,
            Capability.MEMORY_SNAPSHOT,
            Capability.DISK_SNAPSHOT,
            Capability.VOLUME_RESIZE,
            Capability.SERIAL_CONSOLE,
            Capability.HOTPLUG,
            Capability.BACKUP,
        }
    ),
    xml=XmlOptions(),
    power_button=True,
    undefine_checkpoints=True,
    live_backup=True,
    restore_run_state=True,
    memory_on_host=True,
    restore_with_definition=True,
    local_view=True,
    volume_streams=True,
    agent_channel=True,
    agent_shutdown=True,
)

TEST_DRIVER = HypervisorFlavor(
    # no migration, no job control, no volume resize, no consoles (virDomainOpenConsole), no hot-plug
    capabilities=frozenset({Capability.MEMORY_SNAPSHOT, Capability.DISK_SNAPSHOT}),
    xml=TEST_DRIVER_OPTIONS,
    power_button=False,
    undefine_checkpoints=False,
    live_backup=False,
    restore_run_state=False,
    memory_on_host=False,
    restore_with_definition=False,
    local_view=False,
    volume_streams=False,
    agent_channel=False,
    agent_shutdown=False,
)


def flavor_for(uri: str, domain_type: str = "qemu") -> HypervisorFlavor:
    """The flavor of the host at ``uri``; ``domain_type`` is the ``<domain type=...>`` of QEMU hosts
    (libvirt's test driver runs only its own "test" domains, whatever is asked)."""
    if uri.split(":", 1)[0] == "test":
        return TEST_DRIVER
    over_ssh = is_ssh(uri)  # its screens are reached through a socket over ssh (display_ssh)
    return replace(QEMU, xml=replace(QEMU.xml, domain_type=domain_type, screen_socket=over_ssh))


__all__ = ["QEMU", "TEST_DRIVER", "HypervisorFlavor", "flavor_for"]
