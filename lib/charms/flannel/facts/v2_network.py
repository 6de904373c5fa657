"""flannel's network in etcd's v2 keyspace, and moving it to v3.

charm-flannel revisions up to f79f180 ran flannel v0.11, which speaks only
etcd's v2 API: its network config and every node's subnet lease live in
the v2 keyspace, which the v3 API does not see
(docs/explanation/etcd-v2-clusters.md). flanneld >= 0.18 reads only v3.
No charm-flannel revision ever moved that data, and a refreshed node then
keeps its subnet only by luck
(subnet.env still there); a node that has moved does not see the leases of
those that have not, and the v3 allocator may hand out a subnet a v2 node
still holds.

What this charm does:
- the carry, when the network is configured before the unit's first
  flanneld start: each v2 lease that fits the network config, whose subnet has no
  v3 lease and whose address holds none, is copied into v3, byte for byte,
  with the time it has left. A node's new flanneld then finds its own lease
  by its address and keeps its subnet (subnet.env or not), and routes the
  nodes still on v2; those nodes keep routing this one through its v2
  lease, which stays.
- the v2 keys stay while any node may still run flannel v0.11, and
  update-status, on a unit that saw v2 data, keeps each
  copy as long-lived as the v2 lease its v0.11 node renews (a node left on
  the old charm for hours keeps its routes from the others).
- once every v2 lease's subnet is held in v3, at the same address, by
  flanneld >= 0.18 (it rewrote the copy: its lease value differs from
  v0.11's), no v0.11 flanneld is left, and update-status deletes flannel's v2
  keys (config and leases). A node that never moves keeps them until its
  v2 lease runs out.

The HTTP side is adapters/etcd_probe.py's (v2 reads) and adapters/etcd.py's
(v2 deletes, v3 writes),
the sequence steps/subnets/etcd.py's (_carry_v2_leases, finish_v2_move);
this module decides.
"""
from __future__ import annotations

import ipaddress
from typing import Any, NamedTuple, Optional

from .etcd_keys import Lease, json_object, lease_subnets
from .netconfig import NetworkConfig

# etcd's v2 TTLs count down from flanneld's 24 h: a copy never outlives its lease
MAX_CARRIED_TTL = 24 * 3600


class V2Lease(NamedTuple):
    name: str               # the key's last part: "10.1.52.0-24"
    value: bytes            # the lease as flannel v0.11 wrote it (PublicIP, Backend*)
    ttl: Optional[int]      # seconds left; None: no TTL (a reservation)

    @property
    def subnet(self) -> Optional[ipaddress.IPv4Network]:
        try:
            return ipaddress.IPv4Network(lease_subnets(self.name)[0])
        except ValueError:
            return None

    @property
    def public_ip(self) -> Optional[str]:
        return (json_object(self.value) or {}).get("PublicIP")


class V2Network(NamedTuple):
    config: Optional[bytes]     # <prefix>/config as stored (None: absent)
    leases: tuple               # V2Lease, ...

    def __bool__(self) -> bool:
        return self.config is not None or bool(self.leases)


def parse_v2_tree(reply: dict[str, Any], prefix: str) -> V2Network:
    """flannel's keys from a recursive v2 GET of `prefix` (etcd's JSON:
    {"node": {"nodes": [...]}})."""
    config, leases = None, []
    top = reply.get("node") or {}
    for node in top.get("nodes") or []:
        key = str(node.get("key", ""))
        if key == f"{prefix}/config" and not node.get("dir"):
            config = str(node.get("value", "")).encode()
        elif key == f"{prefix}/subnets" and node.get("dir"):
            for lease in node.get("nodes") or []:
                if lease.get("dir"):
                    continue
                ttl = lease.get("ttl")
                leases.append(V2Lease(name=str(lease.get("key", "")).rsplit("/", 1)[-1],
                                      value=str(lease.get("value", "")).encode(),
                                      ttl=int(ttl) if ttl is not None else None))
    return V2Network(config=config, leases=tuple(sorted(leases, key=lambda lease: lease.name)))


def fits(lease: V2Lease, config: NetworkConfig) -> bool:
    """Whether flanneld >= 0.18 would take `lease` under `config`: inside
    the network, of its subnet length, not the network's first subnet
    (flanneld's SubnetMin), and an IPv4-only lease with IPv6 off (a v4-only
    lease under a dual-stack config is dropped and leased anew)."""
    subnet = lease.subnet
    if subnet is None or config.ipv6 is not None:
        return False
    return (subnet.prefixlen == config.subnet_len and subnet.subnet_of(config.network)
            and subnet != config.first_subnet)


def leases_to_carry(v2: V2Network, v3_leases: list[Lease], config: NetworkConfig) -> list:
    """The v2 leases to copy into v3: those that fit `config`, whose subnet
    no v3 lease holds yet, and whose address holds none (a node that moved
    and gave its v3 lease back is not brought back by the v2 lease it left)."""
    subnets = {lease.subnet for lease in v3_leases}
    addresses = {lease.public_ip for lease in v3_leases}
    return [lease for lease in v2.leases
            if fits(lease, config) and str(lease.subnet) not in subnets
            and lease.public_ip not in addresses]


def carried_ttl(lease: V2Lease) -> int:
    """The TTL a lease's v3 copy gets: what it has left in v2, at least a
    second (a lease with none left is about to go anyway)."""
    return max(1, min(lease.ttl if lease.ttl is not None else MAX_CARRIED_TTL,
                      MAX_CARRIED_TTL))


def moved(v2: V2Network, v3_leases: list[Lease]) -> bool:
    """Whether no node runs flannel v0.11 any more: every v2 lease's subnet
    has a v3 lease that flanneld >= 0.18 wrote, i.e. that is no longer the
    v0.11 lease the charm copied (it writes PublicIPv6, the VNI, ...). A v2
    network with no lease left has moved too."""
    held = {lease.subnet: lease.attributes for lease in v3_leases}
    for lease in v2.leases:
        now = held.get(str(lease.subnet))
        if now is None or now == json_object(lease.value) or \
                now.get("PublicIP") != lease.public_ip:
            return False
    return True


def copies(v2: V2Network, v3_leases: list[Lease]) -> list:
    """The v2 leases whose v3 lease is still the charm's copy: their node
    runs flannel v0.11 yet."""
    held = {lease.subnet: lease.attributes for lease in v3_leases}
    return [lease for lease in v2.leases if held.get(str(lease.subnet)) == json_object(lease.value)]
