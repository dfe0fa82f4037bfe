"""The VM controller: keeps each VM's domain in the power state the decision asks for.

One reconcile runs ``ORDER`` over one ``VMState`` and writes the state once at the end;
the writes that must land before a driver call are the durable points of
``durable.py``. Every step is idempotent: a crash anywhere re-runs the chain from the
stored state.
"""

from __future__ import annotations

from virtplane.controllers.chain import Step, run_chain
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.vm import devices, guest, power, recovery, steps
from virtplane.controllers.vm.state import VMState
from virtplane.domain.resources import VirtualMachine
from virtplane.reconcile.types import Request, Result

ORDER: tuple[Step[VMState], ...] = (
    Step("migration", steps.migration),  # a migration in flight owns the domain: stop here
    Step("deletion", steps.deletion),  # deleted: remove the domain, then the VM: stop here
    Step("finalizer", steps.finalizer),
    Step("nics", steps.nics),  # status.nics: MACs and addresses, as the API filled them in
    Step("disks", steps.disks),
    Step("host", steps.host),  # unreachable: wait; fenced: release the VM
    Step("observe", steps.observe),  # read the domain; define it where it is missing
    Step("guest", guest.guest),  # the guest's agent: connected or not, the addresses it reports
    Step("devices", devices.devices),  # running: attach or detach one disk or NIC (hot-plug)
    Step("decide", power.decide),  # the run-policy decision (pure), applied to the state
    Step("recovery", recovery.recovery),  # released from a fenced host: a slot first, then the start
    Step("act", power.act),  # at most one driver action, after its durable point
)


class VMReconciler:
    def __init__(self, ctx: ControllerContext, *, console_dir: str | None = None) -> None:
        self.ctx = ctx
        self.console_dir = console_dir

    async def __call__(self, req: Request) -> Result | None:
        vm = self.ctx.read(VirtualMachine, req.name)  # VMState copies what the steps change
        if vm is None:
            return None
        state = VMState(self.ctx, vm, self.console_dir, self.ctx.now())
        try:
            result, _ = await run_chain(ORDER, state)
            if not state.gone:
                await state.save()
        finally:  # written or not, a placement made here is no longer in flight
            self.ctx.promised.release(req.name)
        return result


__all__ = ["ORDER", "VMReconciler"]
