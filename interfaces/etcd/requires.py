"""Requires side of the ``etcd`` interface.

The provider (the etcd charm's ``db`` endpoint) publishes, as plain strings
on each of its unit databags:

- ``connection_string``: comma-joined client URLs, one per etcd member;
- ``version``: the etcd version ("" means "assume 2.x");
- ``client_ca``, ``client_cert``, ``client_key``: PEM text the client must use.

The values are the same on every etcd unit, so any unit that has them will do.
This side publishes nothing.

Flags (``{endpoint_name}`` is the endpoint's name in metadata.yaml, e.g. etcd):

- ``{endpoint_name}.connected``: at least one etcd unit is joined;
- ``{endpoint_name}.available``: and one of them published a connection string;
- ``{endpoint_name}.tls.available``: and one of them published all three of
  client_ca, client_cert and client_key.

All three are cleared when no remote unit remains (departed/broken).

The client key is secret: nothing here logs or prints relation values, and
nothing keeps them in the unit's key-value store (.unit-state.db):
charms.reactive keeps each departed unit's whole databag there
(``reactive.endpoints.departed.<endpoint>``, for charms that clean up after
departed units) until a charm clears it, so this endpoint clears it in the
hook the unit departs in; and the hashes of the values it compares go with
the relation.
"""

import json

from charmhelpers.core import unitdata
from charms.reactive import Endpoint, toggle_flag

TLS_KEYS = ("client_ca", "client_cert", "client_key")


def _text(value):
    """A relation value as stripped text; "" for None.

    The provider publishes raw strings, but a JSON-encoded string (as an
    Endpoint-based provider publishing through ``to_publish`` would write) is
    accepted too.
    """
    if value is None:
        return ""
    text = str(value).strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            decoded = json.loads(text)
        except ValueError:
            return text
        if isinstance(decoded, str):
            return decoded.strip()
    return text


class EtcdRequires(Endpoint):
    """The ``etcd`` endpoint of a client of etcd."""

    def manage_flags(self):
        if self.all_departed_units:
            # (a departed etcd unit's databag holds the client key): zeroed
            # where it was, not left in the database file's free space, whatever
            # the SQLite build's default
            unitdata.kv().cursor.execute("PRAGMA secure_delete = ON")
            self.all_departed_units.clear()
        if not self.relations:
            unitdata.kv().unsetrange(prefix=f"reactive.data_changed.endpoint.{self.endpoint_name}.")
        joined = self.is_joined
        toggle_flag(self.expand_name("{endpoint_name}.connected"), joined)
        toggle_flag(
            self.expand_name("{endpoint_name}.available"),
            joined and bool(self.connection_string()),
        )
        toggle_flag(
            self.expand_name("{endpoint_name}.tls.available"),
            joined and self.client_credentials() is not None,
        )

    def _values(self, key):
        """The non-empty values of ``key`` across joined units, in unit order."""
        for unit in self.all_joined_units:
            value = _text(unit.received_raw.get(key))
            if value:
                yield value

    def connection_string(self):
        """Comma-joined etcd client URLs, or "" while no unit published one."""
        return next(self._values("connection_string"), "")

    def endpoints(self):
        """The client URLs of connection_string() as a list."""
        return [u.strip() for u in self.connection_string().split(",") if u.strip()]

    def version(self):
        """The etcd version the provider reported ("" if none)."""
        return next(self._values("version"), "")

    def client_credentials(self):
        """``(ca, cert, key)`` PEM text from a unit that published all three.

        Returns None while no single unit has published all of them.
        """
        for unit in self.all_joined_units:
            data = unit.received_raw
            values = tuple(_text(data.get(key)) for key in TLS_KEYS)
            if all(values):
                return values
        return None
