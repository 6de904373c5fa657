"""flanneld and the CNI plugin on disk (flag flannel.installed), from the
flannel-<arch> resource, through the install record; and the record
itself checked before anything else in every hook."""
from __future__ import annotations

from typing import Optional

from ..adapters.install_record import record_problem
from ..facts.flanneld import offers_readyz
from ..facts.paths import install_record_dir
from ..facts.status import Problem
from .context import HookContext
from .flags import INSTALLED, NRPE_CONFIGURED, RECORD_DAMAGED, SERVICE_RUNNING
from .outcome import Outcome

FLAG = INSTALLED


def stale(ctx: HookContext) -> Optional[str]:
    """A binary gone since it was installed (someone's cleanup, a principal's
    tidy-up): installed again from the resource, in the same hook. A stat:
    a file someone wrote over it is the record's to keep, not a reason to
    reinstall."""
    for path in (ctx.paths.flanneld, ctx.paths.cni_plugin):
        if not path.exists():
            return f"{path} is gone"
    return None


def run(ctx: HookContext) -> Outcome:
    from ..adapters import resource   # (tarfile: not for the hooks that only check)
    out = Outcome()
    try:
        name = resource.resource_name()
        files = resource.read_resource(ctx.juju.resource_path(name), name)
    except resource.ResourceProblem as problem:
        return out.found(Problem.RESOURCE, str(problem))
    full = resource.install_members(ctx.record, files, (
        (ctx.paths.flanneld, "flanneld"), (ctx.paths.cni_plugin, "cni-plugin/flannel")))
    out.found(Problem.RESOURCE, full)
    if full:
        return out   # blocked; any later hook installs once there is room
    out.version = ctx.machine.flanneld_version(ctx.paths.flanneld)
    if offers_readyz(out.version) != offers_readyz(ctx.state.flanneld_version):
        out.clear(NRPE_CONFIGURED)   # the readiness check comes or goes in this hook
    ctx.state.flanneld_version = out.version
    # a new flanneld restarts it (its input digest)
    return out.clear(SERVICE_RUNNING).set(INSTALLED)


def check_record(ctx: HookContext, *, installed: bool, damaged: bool) -> Outcome:
    """The install record's problem: unreadable, or missing although this
    charm installed through it. While there is one, flannel.record-damaged
    keeps every handler that writes through the record from running and
    stop deletes nothing: the unit is blocked, flanneld and the pods carry
    on."""
    out = Outcome()
    problem = record_problem(install_record_dir(ctx.juju.charm_dir), expected=installed)
    out.found(Problem.RECORD, problem)
    if problem:
        if not damaged:
            out.say(f"{problem}: flannel writes and removes no file until it is back", True)
        return out.set(RECORD_DAMAGED)
    if damaged:
        out.say("The install record is readable again")
        out.clear(RECORD_DAMAGED)
    return out
