"""virtplane: a virtualization control plane that keeps every VM in the power state its owner asked for."""

__version__ = "0.1.0"
