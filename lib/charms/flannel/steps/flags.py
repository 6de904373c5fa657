"""The reactive flags: the contract between the handlers (reactive/flannel.py),
each the result of one step. Their names are part of a refresh's contract:
a unit refreshed from an earlier revision reads the flags it set.

  flannel.installed           flanneld and the CNI plugin are on disk (steps/install.py)
  flannel.network.configured  etcd (or net-conf.json) holds the network this node runs
                              (steps/network.py)
  flannel.service.running     flanneld was started with its current inputs (steps/flanneld.py)
  flannel.cni.configured      the conflist is written and handed to the principal (steps/cni.py)
  flannel.nrpe.configured     the Nagios check is written (steps/nrpe.py)
  flannel.leases.reachable    where flanneld keeps its leases can be reached: etcd's
                              client credentials (subnet-manager=etcd) or root's
                              kubeconfig (kubernetes); set at each hook's start
  flannel.series-upgrade      between pre- and post-series-upgrade
  flannel.stopped             the stop hook ran: nothing may install again
                              (Juju runs remove after stop, with no flags left)
  flannel.record-damaged      the install record is unreadable, or missing after an
                              install: nothing is written or removed through it
"""
INSTALLED = "flannel.installed"
NETWORK_CONFIGURED = "flannel.network.configured"
SERVICE_RUNNING = "flannel.service.running"
CNI_CONFIGURED = "flannel.cni.configured"
NRPE_CONFIGURED = "flannel.nrpe.configured"
SERIES_UPGRADE = "flannel.series-upgrade"
STOPPED = "flannel.stopped"
RECORD_DAMAGED = "flannel.record-damaged"
LEASES_REACHABLE = "flannel.leases.reachable"
# every flag of this charm's: the teardown clears them all
OWN = (INSTALLED, NETWORK_CONFIGURED, SERVICE_RUNNING, CNI_CONFIGURED, SERIES_UPGRADE,
       NRPE_CONFIGURED, RECORD_DAMAGED, LEASES_REACHABLE)

# the interface layers' flags (interfaces/)
ETCD_CONNECTED = "etcd.connected"
ETCD_AVAILABLE = "etcd.available"
ETCD_TLS = "etcd.tls.available"
CNI_JOINED = "endpoint.cni.joined"
NRPE_AVAILABLE = "nrpe-external-master.available"
