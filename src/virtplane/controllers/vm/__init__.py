"""The VM controller (``reconciler.VMReconciler``): an ordered chain of small steps over one state."""

from virtplane.controllers.vm.reconciler import ORDER, VMReconciler
from virtplane.controllers.vm.spec import build_domain_spec
from virtplane.controllers.vm.steps import FINALIZER

__all__ = ["FINALIZER", "ORDER", "VMReconciler", "build_domain_spec"]
