"""What the charm knows, as plain typed values and pure functions: the
network config, leases, options, paths, problems and the status. Nothing
here reads or writes the machine, etcd or Juju (tests/unit/test_layers.py
keeps it so)."""
