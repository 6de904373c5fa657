"""flanneld's Nagios checks for the nrpe charm (running; ready, where
flanneld offers /readyz) (flag flannel.nrpe.configured).
NRPE.write() rewrites the check and restarts nagios-nrpe-server: only when
the check or what names it (nrpe's host name, the nagios options) changed,
not in every hook."""
from __future__ import annotations

from typing import Optional

from ..adapters import nrpe
from ..facts.digest import digest
from ..facts.flanneld import offers_readyz
from .context import HookContext
from .flags import NRPE_CONFIGURED
from .outcome import Outcome, inputs_changed

FLAG = NRPE_CONFIGURED


def inputs(ctx: HookContext) -> Optional[str]:
    nagios = ctx.juju.nagios()
    if nagios is None:
        return None
    return digest(wanted_checks(ctx), *nagios, ctx.config.get("nagios_context"),
                  ctx.config.get("nagios_servicegroups"))


def wanted_checks(ctx: HookContext) -> list[dict]:
    return nrpe.checks(readyz=offers_readyz(ctx.state.flanneld_version))


def stale(ctx: HookContext) -> Optional[str]:
    return inputs_changed(ctx.state.nrpe_inputs, inputs(ctx), "the Nagios check's names changed")


def run(ctx: HookContext) -> Outcome:
    nrpe.write_checks(wanted_checks(ctx))
    ctx.state.nrpe_inputs = inputs(ctx)
    return Outcome().set(NRPE_CONFIGURED)


def remove(ctx: HookContext) -> Outcome:
    nrpe.remove_checks()
    ctx.state.nrpe_inputs = None
    return Outcome().clear(NRPE_CONFIGURED)
