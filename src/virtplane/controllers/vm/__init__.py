"""The VM controller (``reconciler.VMReconciler``): an ordered chain of small steps over one state;
``watches`` says which changes of other objects make a VM look again."""

from virtplane.controllers.vm.reconciler import ORDER, VMReconciler
from virtplane.controllers.vm.spec import build_domain_spec
from virtplane.controllers.vm.steps import FINALIZER, show_migrating

__all__ = ["FINALIZER", "ORDER", "VMReconciler", "build_domain_spec", "show_migrating"]
