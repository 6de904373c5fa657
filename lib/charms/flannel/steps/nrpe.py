"""flanneld's Nagios check for the nrpe charm (flag flannel.nrpe.configured).
NRPE.write() rewrites the check and restarts nagios-nrpe-server: only when
the check or what names it (nrpe's host name, the nagios options) changed,
not in every hook."""
from __future__ import annotations

from typing import Optional

from ..adapters import nrpe
from ..facts.digest import digest
from .context import HookContext
from .flags import NRPE_CONFIGURED
from .outcome import Outcome, inputs_changed

FLAG = NRPE_CONFIGURED


def inputs(ctx: HookContext) -> Optional[str]:
    nagios = ctx.juju.nagios()
    if nagios is None:
        return None
    return digest(nrpe.CHECK, *nagios, ctx.config.get("nagios_context"),
                  ctx.config.get("nagios_servicegroups"))


def stale(ctx: HookContext) -> Optional[str]:
    return inputs_changed(ctx.state.nrpe_inputs, inputs(ctx), "the Nagios check's names changed")


def run(ctx: HookContext) -> Outcome:
    nrpe.write_check()
    ctx.state.nrpe_inputs = inputs(ctx)
    return Outcome().set(NRPE_CONFIGURED)


def remove(ctx: HookContext) -> Outcome:
    nrpe.remove_check()
    ctx.state.nrpe_inputs = None
    return Outcome().clear(NRPE_CONFIGURED)
