"""The VM controller (``reconciler.VMReconciler``): an ordered chain of small steps over one state;
``watches`` says which changes of other objects make a VM look again."""

from virtplane.controllers.registration import Registration
from virtplane.controllers.vm.reconciler import ORDER, VMReconciler
from virtplane.controllers.vm.spec import build_domain_spec
from virtplane.controllers.vm.steps import FINALIZER, show_migrating
from virtplane.controllers.vm.watches import KIND, WATCHES

CONTROLLER = Registration(KIND, lambda parts: VMReconciler(parts.ctx, console_dir=parts.console_dir), WATCHES)
"""Its workers are ``ControlPlaneOptions.workers``: how many VMs move at once (why: there)."""

__all__ = ["CONTROLLER", "FINALIZER", "ORDER", "VMReconciler", "build_domain_spec", "show_migrating"]
