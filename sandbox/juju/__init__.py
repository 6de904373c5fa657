"""sandbox.juju: the emulated Juju (model state, hook tools, unit agent).

    from sandbox.juju import Controller, LocalExecutor, EtcdApp, KubernetesWorkerApp

    ctl = Controller(state_dir)                       # a fresh model
    m0 = ctl.add_machine(machine_or_executor, address="10.0.0.5", cidr="10.0.0.0/24")
    ctl.deploy(EtcdApp.from_server(etcd))             # emulated, no machine
    ctl.deploy(KubernetesWorkerApp(), to=[m0])        # emulated principal on m0 (the
                                                      # reactive worker of LP #1866869;
                                                      # OpsKubernetesWorkerApp: the ops one)
    ctl.deploy("flannel", charm_dir, resources={"flannel-amd64": tarball})
    ctl.add_relation("flannel:etcd", "etcd:db")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")   # creates flannel/0 on m0
    ctl.settle()                                       # runs hooks until quiescent
    print(ctl.format_status())
    ctl.remove_relation("flannel:cni", "kubernetes-worker:cni"); ctl.settle()

See controller.py for the hook order, hooktools.py for the hook tools.
"""

from .agent import HookRun
from .apps import (CosAgentApp, EmulatedApp, EtcdApp, HookContext, KubernetesWorkerApp,
                   NrpeApp)
from .controller import Controller, SettleError
from .executors import Executor, LocalExecutor, MachineExecutor, UnshareExecutor
from .model import Model, ModelError, StateFile
from .operations import ActionResult
from .principals import OpsKubernetesControlPlaneApp, OpsKubernetesWorkerApp

__all__ = [
    "Controller", "SettleError", "HookRun",
    "EmulatedApp", "EtcdApp", "HookContext", "KubernetesWorkerApp",
    "OpsKubernetesWorkerApp", "OpsKubernetesControlPlaneApp", "NrpeApp", "CosAgentApp",
    "Executor", "LocalExecutor", "MachineExecutor", "UnshareExecutor",
    "Model", "ModelError", "StateFile", "ActionResult",
]
