"""The libvirt HypervisorDriver (``LibvirtDriver``), for any libvirt URI.

Importable without libvirt-python: the module is loaded when a driver
connects, and a missing module is a PermanentError then.
"""

from virtplane.drivers.libvirt._libvirt import available
from virtplane.drivers.libvirt.driver import LibvirtDriver

__all__ = ["LibvirtDriver", "available"]
