"""The local sandbox: emulated machines, a real etcd and an emulated Juju.

Not part of the built charm. See docs/contributing.md, "The sandbox".
"""

import sys
from pathlib import Path

#: the charm's own library (lib/), which a few benchmarks run as the charm does
CHARM_LIB = Path(__file__).resolve().parent.parent / "lib"


def import_charm_library() -> None:
    """Make the charm's lib/ importable (charms.flannel)."""
    if str(CHARM_LIB) not in sys.path:
        sys.path.insert(0, str(CHARM_LIB))
