"""Provides side of the ``nrpe-external-master`` interface (scope: container).

The nrpe subordinate, on the same machine, publishes ``nagios_hostname`` and
``nagios_host_context``; the monitored charm writes its checks as NRPE
command files under /etc/nagios/nrpe.d and publishes a ``monitors`` YAML
document (``monitors: remote: nrpe: {shortname: {command: check_x}}``) so the
nagios server learns about them.

This layer deliberately leaves both of those to
``charmhelpers.contrib.charmsupport.nrpe.NRPE``: its ``write()`` writes the
command files, restarts nagios-nrpe-server and merges ``monitors`` into this
unit's databag with ``relation-set`` itself (and ``NRPE()`` publishes
``primary``). Publishing ``monitors`` here as well, through ``to_publish``,
would race with that merge and could drop checks, so this endpoint never
writes to the relation. It only raises a flag and reads what nrpe published.

Flags (``{endpoint_name}`` is the endpoint's name, nrpe-external-master):

- ``{endpoint_name}.available``: the nrpe unit is joined (cleared when it
  departs); the charm then (re)writes its checks with charmhelpers' NRPE.
"""

import json

from charms.reactive import Endpoint, toggle_flag


def _text(value):
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


class NrpeExternalMasterProvides(Endpoint):
    """The ``nrpe-external-master`` endpoint of a monitored charm."""

    def manage_flags(self):
        toggle_flag(self.expand_name("{endpoint_name}.available"), self.is_joined)

    def _first(self, key):
        for unit in self.all_joined_units:
            value = _text(unit.received_raw.get(key))
            if value is not None:
                return value
        return None

    def nagios_hostname(self):
        """The host name nrpe registered this machine under, or None."""
        return self._first("nagios_hostname")

    def nagios_host_context(self):
        """The nagios host context nrpe uses, or None."""
        return self._first("nagios_host_context")
