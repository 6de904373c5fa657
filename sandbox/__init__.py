"""The local sandbox: emulated machines, a real etcd and an emulated Juju.

Not part of the built charm. See docs/contributing.md, "The sandbox".
"""
