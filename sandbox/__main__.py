"""python -m sandbox demo --charm DIR [--resource TARBALL]
python -m sandbox bench --charm DIR [--resource TARBALL] [--json FILE] [--machines 1,4,16]
python -m sandbox faults --charm DIR [--resource TARBALL] [--only TEXT] [--soak]
python -m sandbox soak --charm DIR [--resource TARBALL] [--cycles 50] [--json FILE]
python -m sandbox dataplane --charm DIR [--resource TARBALL] [--seconds 3] [--json FILE]
python -m sandbox growth --charm DIR [--resource TARBALL] [--hooks 100] [--leases 16,1000,5000]
python -m sandbox kube-bench --charm DIR [--resource TARBALL] [--pods 10] [--json FILE]
python -m sandbox conformance --charm DIR [--resource TARBALL]
    --mode etcd|dual-stack|kubernetes|ipv6-only
    [--focus REGEX] [--junit DIR] [--after-remove-add [--old-charm]]
python -m sandbox charmcraft-pack [--platform ubuntu-22.04-amd64] [--out DIR]

--charm takes a built charm directory or a packed .charm."""
import sys

from sandbox import (bench, charmcraft_pack, conformance, dataplane, demo, growth, kube_bench,
                     soak)
from sandbox.faults import runner as faults

COMMANDS = {"demo": demo.main, "bench": bench.main, "faults": faults.main,
            "kube-bench": kube_bench.main,
            "soak": soak.main, "dataplane": dataplane.main, "growth": growth.main,
            "charmcraft-pack": charmcraft_pack.main, "conformance": conformance.main}

if __name__ == "__main__":
    if sys.argv[1:2] == [] or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
