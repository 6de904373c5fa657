"""Requires side of the ``kubernetes-cni`` interface (scope: container).

The principal is kubernetes-worker or kubernetes-control-plane, either the
ops charms or the reactive ones that preceded them. What a principal
publishes varies with its generation, so every key is optional here:

- ``kubeconfig-hash``: sha256 of the principal's kubeconfig (the ops charms);
- ``service-cidr``: the Kubernetes service network (control plane only);
- ``image-registry``: the registry images should come from;
- ``is_master``, ``kubeconfig_path``: published by the reactive principals.

The subordinate (this side) publishes, as plain strings on its unit databag,
``cidr`` (the pod network) and ``cni-conf-file`` (the file name in
/etc/cni/net.d). The principal treats the CNI as configured once both are set.

Flags (``{endpoint_name}`` is the endpoint's name in metadata.yaml, e.g. cni):

- ``{endpoint_name}.connected``: the principal unit is joined;
- ``{endpoint_name}.kubeconfig.changed``: set when the principal's
  kubeconfig-hash differs from the last one seen (this charm reads no
  kubeconfig, and leaves it set).

The framework's own ``endpoint.{endpoint_name}.joined`` and
``endpoint.{endpoint_name}.changed.<key>`` flags are there as usual.
"""

import json

from charms.reactive import Endpoint, data_changed, set_flag, toggle_flag

TRUE_WORDS = ("true", "yes", "1", "on")


def _text(value):
    """A relation value as stripped text, or None when absent or empty.

    Principals publish raw strings; a JSON-encoded string is accepted too.
    """
    if value is None:
        return None
    text = str(value).strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, str):
            text = decoded.strip()
    return text or None


class CNIRequires(Endpoint):
    """The ``cni`` endpoint of a CNI subordinate charm."""

    def manage_flags(self):
        joined = self.is_joined
        toggle_flag(self.expand_name("{endpoint_name}.connected"), joined)
        if joined:
            kubeconfig_hash = self.kubeconfig_hash()
            key = "interface.kubernetes-cni.{}.kubeconfig-hash".format(self.endpoint_name)
            if kubeconfig_hash and data_changed(key, kubeconfig_hash):
                set_flag(self.expand_name("{endpoint_name}.kubeconfig.changed"))

    def set_config(self, cidr, cni_conf_file):
        """Publish the pod network and the CNI config file name on every relation."""
        wanted = {"cidr": str(cidr), "cni-conf-file": str(cni_conf_file)}
        for relation in self.relations:
            published = relation.to_publish_raw
            # Only touch the databag when something changes, so that an
            # unchanged config does not cause a relation-set in every hook.
            if any(published.get(k) != v for k, v in wanted.items()):
                published.update(wanted)

    def _first(self, key):
        for unit in self.all_joined_units:
            value = _text(unit.received_raw.get(key))
            if value is not None:
                return value
        return None

    def kubeconfig_hash(self):
        """The principal's kubeconfig-hash, or None if it published none."""
        return self._first("kubeconfig-hash")

    def service_cidr(self):
        """The principal's service-cidr (control plane only), or None."""
        return self._first("service-cidr")

    def image_registry(self):
        """The principal's image-registry, or None."""
        return self._first("image-registry")

    def kubeconfig_path(self):
        """The kubeconfig path the reactive principals published, or None."""
        return self._first("kubeconfig_path")

    def is_control_plane(self):
        """Whether the principal is a control-plane unit.

        The reactive principals say so with ``is_master`` ("True"/"False",
        which wins when present); the ops ones publish ``service-cidr`` only
        from the control plane.
        """
        is_master = self._first("is_master")
        if is_master is not None:
            return is_master.lower() in TRUE_WORDS
        return self.service_cidr() is not None
