"""The charm's hands: each module is one thing of the world it reads and
changes (etcd, a device, iptables, systemd, files). Adapters import facts,
never steps; only adapters/etcd.py imports etcd3gw and requests, only
adapters/render.py jinja2 (tests/unit/test_layers.py keeps it so)."""
