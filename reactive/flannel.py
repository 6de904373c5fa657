"""The flannel charm's handlers, in the order a unit's life runs them.

Each handler reads flags, runs one step of the charm's library
(lib/charms/flannel/steps) with this hook's context and applies what the
step returns (charms.flannel.hook.apply: flags, problems, what the
principal hears). Each step declares its flag and what invalidates it
(`stale`); docs/reference/flags.md has the flags' contract. Before the
handlers, `watch_inputs` clears the flag of every step whose inputs
changed; after them, `finish` settles the pods' bridge on flanneld's lease
and sets the status from what the hook saw.
"""
from charmhelpers.core import hookenv
from charms.reactive import (clear_flag, get_flags, hook, is_flag_set, set_flag, when,
                             when_not)

from charms.flannel.hook import apply, context
# the steps every hook may run; those of a few hooks (adoption, cos_agent,
# teardown) are imported by their handlers: an idle hook does not pay for them
from charms.flannel.steps import (bridge, cni, flanneld, install, network, nrpe, offload,
                                  status, subnets, supervision)
from charms.flannel.steps.flags import (CNI_CONFIGURED, CNI_JOINED, INSTALLED,
                                        LEASES_REACHABLE, NETWORK_CONFIGURED,
                                        NRPE_AVAILABLE, NRPE_CONFIGURED, RECORD_DAMAGED,
                                        SERIES_UPGRADE, SERVICE_RUNNING, STOPPED)

# the steps whose results can go stale, in flag order
WATCHED = (install, network, flanneld, cni, nrpe)


def watch_inputs():
    """Before any handler: the record checked, then the flag of each step
    whose inputs changed since it acted (or whose result is gone) cleared,
    so that the step runs again in this hook; an idle hook whose inputs
    stand invokes no handler at all."""
    ctx, flags = context(), set(get_flags())   # (each is_flag_set reads every flag)
    # (flanneld's inputs are remembered once it ran: a unit whose binaries
    # went is reinstalling, and its record is still expected)
    installed = INSTALLED in flags or ctx.state.flanneld_inputs is not None
    checked = apply(install.check_record(ctx, installed=installed,
                                         damaged=RECORD_DAMAGED in flags))
    if STOPPED in flags:
        return
    # where the leases are kept (etcd, or the Kubernetes API) can be reached
    # (in every live hook: forget_network keys on it whatever else holds)
    reachable = subnets.reachable(ctx)
    if reachable != (LEASES_REACHABLE in flags):
        (set_flag if reachable else clear_flag)(LEASES_REACHABLE)
    if checked.set_flags or SERIES_UPGRADE in flags:
        return
    for step in WATCHED:
        why = step.FLAG in flags and step.stale(ctx)
        if why:
            hookenv.log(f"{step.FLAG} again: {why}", level=hookenv.DEBUG)
            clear_flag(step.FLAG)


hookenv.atstart(watch_inputs)


@hook("install")
def fresh_install():
    clear_flag(STOPPED)


@hook("upgrade-charm")
def reinstall_on_upgrade():
    # The resource may be new: install again through the same record; flanneld
    # restarts only if its inputs changed. INSTALLED stays while the record is
    # damaged: it is what tells a missing record from a fresh unit.
    from charms.flannel.steps import adoption
    if not is_flag_set(RECORD_DAMAGED):
        apply(adoption.take_over(context(), get_flags()))
        clear_flag(INSTALLED)


@when_not(INSTALLED, SERIES_UPGRADE, STOPPED, RECORD_DAMAGED)
def install_flannel():
    apply(install.run(context()))


@hook("update-status")
def supervise_flanneld():
    # what flanneld does not notice: etcd rebuilt, a lost lease or Node, a
    # missed route, a device gone
    flags = set(get_flags())
    if not flags & {STOPPED, SERIES_UPGRADE, RECORD_DAMAGED}:
        apply(supervision.run(context(), flanneld_started=SERVICE_RUNNING in flags))


@when(INSTALLED, LEASES_REACHABLE)
@when_not(NETWORK_CONFIGURED, SERIES_UPGRADE, RECORD_DAMAGED)
def configure_network():
    apply(network.run(context()))


@when(NETWORK_CONFIGURED)
@when_not(LEASES_REACHABLE)
def forget_network():
    # without etcd (or the kubeconfig) the network cannot be checked; a
    # relation added back (maybe to another etcd) must write it again
    clear_flag(NETWORK_CONFIGURED)


@when(INSTALLED, NETWORK_CONFIGURED, LEASES_REACHABLE)
@when_not(SERVICE_RUNNING, SERIES_UPGRADE, RECORD_DAMAGED)
def run_flanneld():
    apply(flanneld.run(context()))


@when(INSTALLED, SERVICE_RUNNING, CNI_JOINED)
@when_not(CNI_CONFIGURED, SERIES_UPGRADE, RECORD_DAMAGED)
def configure_cni():
    apply(cni.run(context()))


@when(INSTALLED, CNI_JOINED)
@when_not(CNI_CONFIGURED, SERVICE_RUNNING, SERIES_UPGRADE, RECORD_DAMAGED)
def configure_cni_before_flanneld():
    # on the Kubernetes API the principal hears of the network first: its
    # kube-controller-manager allocates the pod CIDRs flanneld leases
    apply(cni.run_before_flanneld(context()))


@when(NRPE_AVAILABLE, INSTALLED)
@when_not(NRPE_CONFIGURED)
def update_nrpe_check():
    apply(nrpe.run(context()))


@when(NRPE_CONFIGURED)
@when_not(NRPE_AVAILABLE)
def remove_nrpe_check():
    apply(nrpe.remove(context()))


@hook("cos-agent-relation-joined", "cos-agent-relation-changed", "upgrade-charm")
def publish_to_cos_agent(cos_agent=None):
    # the rules and dashboard are the charm's files: new ones come with a refresh.
    # (In a relation hook charms.reactive hands a @hook handler the endpoint.)
    from charms.flannel.steps import cos_agent
    apply(cos_agent.run(context()))


@hook("pre-series-upgrade")
def pause_for_series_upgrade():
    apply(flanneld.pause(context()))


@hook("post-series-upgrade")
def resume_after_series_upgrade():
    apply(flanneld.resume(context()))


@hook("stop")
def remove_flannel():
    """Undo exactly what this charm did, and nothing else (LP #1866869)."""
    tear_down()


@hook("remove")
def remove_unstarted_unit():
    # Juju runs `stop` only for a unit that started: one removed between its
    # install and its start gets `remove` alone
    if not is_flag_set(STOPPED):
        tear_down()


def tear_down():
    from charms.flannel.steps import teardown
    ctx = context()
    configured = is_flag_set(NRPE_CONFIGURED)
    apply(teardown.run(ctx, masked=is_flag_set(SERIES_UPGRADE),
                       remove_nrpe_check=lambda: configured and nrpe.remove(ctx)))


def finish():
    """After every handler: the pods' bridge settled on flanneld's lease and
    checksum offload set on its vxlan devices, then the status worked out
    from that same lease."""
    flags = set(get_flags())   # (the steps below set none)
    if STOPPED in flags:
        return
    ctx = context()
    lease = ctx.lease()
    if not flags & {SERIES_UPGRADE, RECORD_DAMAGED}:
        apply(bridge.run(ctx, lease, flanneld_started=SERVICE_RUNNING in flags))
        apply(offload.run(ctx, flanneld_started=SERVICE_RUNNING in flags))
    seen = status.Seen(
        installed=INSTALLED in flags, series_upgrade=SERIES_UPGRADE in flags,
        network_configured=NETWORK_CONFIGURED in flags,
        service_started=SERVICE_RUNNING in flags, cni_configured=CNI_CONFIGURED in flags)
    shown = status.status(ctx, seen, lease)
    current = [shown.state, shown.message]
    ctx.juju.set_status(shown.state, shown.message,
                        unless_unchanged=ctx.idle and ctx.state.status == current)
    ctx.state.status = current
    status.remember(ctx)


hookenv.atexit(finish)
