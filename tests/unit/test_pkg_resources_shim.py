"""Every hook imports charms.reactive, which imports pkg_resources for one
call (iter_entry_points); the bootstrap answers it from importlib.metadata
instead (bootstrap.EntryPointsOnly). It must answer as pkg_resources does,
and anything else must still reach the real pkg_resources."""
from __future__ import annotations

import subprocess
import sys

COMPARE = """
import sys
from charms.flannel.bootstrap import EntryPointsOnly
shim = EntryPointsOnly()
sys.modules["pkg_resources"] = shim
light = sorted((e.name, e.value) for e in shim.iter_entry_points("console_scripts"))
named = [e.name for e in shim.iter_entry_points("console_scripts", "pytest")]
del sys.modules["pkg_resources"]
path = list(sys.path)
import pkg_resources
# (pkg_resources also lists what setuptools vendors, which it adds to sys.path)
real = sorted((e.name, f"{e.module_name}:{'.'.join(e.attrs)}" if e.attrs else e.module_name)
              for e in pkg_resources.iter_entry_points("console_scripts")
              if e.dist.location in path)
print(light == real and bool(real), named)
"""

FALL_THROUGH = """
import sys
from charms.flannel.bootstrap import EntryPointsOnly
shim = EntryPointsOnly()
sys.modules["pkg_resources"] = shim
newer = shim.parse_version("1.10") > shim.parse_version("1.9")
real = sys.modules["pkg_resources"]
shim.Requirement   # asked again: the same real module, not imported anew
print(newer, type(real).__name__, sys.modules["pkg_resources"] is real)
"""


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": ":".join(sys.path)}).stdout.strip()


def test_entry_points_are_those_pkg_resources_finds():
    assert run(COMPARE) == "True ['pytest']"


def test_anything_else_comes_from_the_real_pkg_resources():
    assert run(FALL_THROUGH) == "True module True"
