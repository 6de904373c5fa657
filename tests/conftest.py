"""Make the charm's lib/ (charms.flannel) and the repo root (sandbox) importable."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "lib"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))
