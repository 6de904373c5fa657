"""The charm's layers point one way: facts <- adapters <- steps <- the
handlers (charms.flannel.hook and reactive/flannel.py). Facts touch nothing
of the world; only adapters/etcd.py imports etcd3gw and requests, only
adapters/render.py jinja2, and an idle hook imports none of them."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib" / "charms" / "flannel"
HEAVY = {"etcd3gw": "adapters/etcd.py", "requests": "adapters/etcd.py",
         "jinja2": "adapters/render.py"}
# what each layer may import of the charm's own (charms.flannel.<layer>)
ALLOWED = {"facts": {"facts"}, "adapters": {"facts", "adapters"},
           "steps": {"facts", "adapters", "steps"}}
# the world, for each layer: standard library modules facts may not use
WORLD = {"subprocess", "socket", "ssl", "http", "shutil", "sqlite3", "requests", "etcd3gw",
         "jinja2", "charmhelpers", "charms"}


def imports(path: Path):
    """(module imported, at module level?) for every import in a file, with
    relative imports made absolute."""
    package = ".".join(path.relative_to(ROOT / "lib").with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if not node.module:
                    for alias in node.names:
                        yield f"{name}.{alias.name}", id(node) in top
                    continue
            else:
                name = node.module
            yield name, id(node) in top


def modules(layer: str):
    return sorted((LIB / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer):
    wrong = []
    for path in modules(layer):
        for name, _ in imports(path):
            if name.startswith("charms.flannel."):
                used = name.split(".")[2]
                if used not in ALLOWED[layer] and used != "__init__":
                    wrong.append(f"{path.relative_to(LIB)} imports {name}")
    assert not wrong, wrong


# where the mode flanneld keeps its leases in is named: the two
# implementations behind steps/subnets' seam, its choice, the option's parsing
NAMING_A_MODE = {"facts/options.py", "steps/subnets/__init__.py", "steps/subnets/etcd.py",
                 "steps/subnets/kube.py"}
MODE_NAMES = {"ETCD", "KUBERNETES", "SUBNET_MANAGERS"}
MODE_VALUES = {"etcd", "kubernetes"}


def names_a_mode(path: Path) -> list[str]:
    """Where a file names a subnet manager: its constants, or a comparison
    with a mode's name ("kubernetes")."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and node.id in MODE_NAMES and isinstance(node.ctx, ast.Load):
            found.append(f"{node.id} at line {node.lineno}")
        elif isinstance(node, ast.alias) and node.name in MODE_NAMES:
            found.append(f"imports {node.name}")
        elif isinstance(node, ast.Compare):
            values = [part.value for part in [node.left, *node.comparators]
                      if isinstance(part, ast.Constant)]
            found += [f"compares with {value!r} at line {node.lineno}" for value in values
                      if value in MODE_VALUES]
        elif isinstance(node, ast.Attribute) and node.attr in ("on_kubernetes", "on_etcd"):
            found.append(f".{node.attr} at line {node.lineno}")
    return found


def test_outside_the_subnet_managers_nothing_asks_which_mode_is_on():
    """flanneld's pkg/subnet has one Manager interface and an implementation
    per mode: so has the charm (steps/subnets). A branch on the mode
    elsewhere is how a mode's problems showed in the other, or a check
    only one mode made."""
    wrong = {}
    for path in [*sorted(LIB.rglob("*.py")), ROOT / "reactive" / "flannel.py"]:
        name = str(path.relative_to(LIB)) if LIB in path.parents else "reactive/flannel.py"
        found = names_a_mode(path)
        if found and name not in NAMING_A_MODE:
            wrong[name] = found
    assert not wrong, wrong
    assert all(names_a_mode(LIB / name) for name in NAMING_A_MODE)


def test_facts_touch_nothing_of_the_world():
    wrong = [f"{path.relative_to(LIB)} imports {name}"
             for path in modules("facts") for name, _ in imports(path)
             if name.split(".")[0] in WORLD and not name.startswith("charms.flannel")]
    assert not wrong, wrong


def test_only_their_adapter_imports_etcd3gw_requests_and_jinja2():
    wrong = []
    for path in sorted(LIB.rglob("*.py")):
        for name, _ in imports(path):
            owner = HEAVY.get(name.split(".")[0])
            if owner and str(path.relative_to(LIB)) != owner:
                wrong.append(f"{path.relative_to(LIB)} imports {name}")
    assert not wrong, wrong


def test_below_the_handlers_nothing_imports_charmhelpers_or_charms_reactive_up_front():
    """(adapters/nrpe.py imports charmhelpers' nrpe inside its functions:
    only with an nrpe relation.)"""
    wrong = [f"{path.relative_to(LIB)} imports {name}"
             for layer in ALLOWED for path in modules(layer)
             for name, top in imports(path)
             if top and (name.startswith("charmhelpers") or name == "charms.reactive"
                         or name.startswith("charms.reactive."))]
    assert not wrong, wrong


def test_the_handlers_use_steps_not_adapters_or_facts():
    """reactive/flannel.py is the table of contents: it runs steps."""
    wrong = [name for name, _ in imports_of_handlers()
             if name.startswith("charms.flannel.") and not name.startswith(
                 ("charms.flannel.steps", "charms.flannel.hook"))]
    assert not wrong, wrong


def imports_of_handlers():
    tree = ast.parse((ROOT / "reactive" / "flannel.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield node.module, True
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, True


IDLE_IMPORTS = """
import sys
sys.path[:0] = [{lib!r}]
import charmhelpers.osplatform
charmhelpers.osplatform.get_platform = lambda: "ubuntu"
import charms.flannel.hook
from charms.flannel.steps import (adoption, bridge, cni, flanneld, install, network, nrpe,
                                  status, subnets, supervision, teardown)
from charms.flannel.steps.subnets import etcd, kube
print(sorted(m for m in {heavy!r} if m in sys.modules))
"""


def test_a_hook_that_writes_nothing_imports_no_etcd3gw_requests_or_jinja2():
    """Every step module and the handlers' glue, imported as a hook imports
    them: the heavy libraries come only when a step uses them."""
    code = IDLE_IMPORTS.format(lib=str(ROOT / "lib"), heavy=sorted(HEAVY))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


HANDLERS_IMPORTS = """
import importlib.util, sys
sys.path[:0] = [{lib!r}]
import charmhelpers.osplatform
charmhelpers.osplatform.get_platform = lambda: "ubuntu"
spec = importlib.util.spec_from_file_location("flannel_handlers", {handlers!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(sorted(m for m in {unused!r} if m in sys.modules))
"""
# what update-status, and every hook but a few, never runs
ONLY_SOME_HOOKS = ("charms.flannel.steps.adoption", "charms.flannel.steps.cos_agent",
                   "charms.flannel.steps.teardown", "charms.flannel.adapters.resource",
                   "charms.flannel.facts.v2_network", "tarfile")


def test_the_handlers_import_no_step_that_only_a_few_hooks_run():
    """Every hook imports reactive/flannel.py: the steps of upgrade-charm,
    cos-agent's hooks and stop (and the resource's unpacking, the v2
    keyspace's move) are imported by the handlers that run them, so that an
    idle hook does not pay for them (`python -m sandbox bench` shows what
    imports cost)."""
    code = HANDLERS_IMPORTS.format(lib=str(ROOT / "lib"), handlers=str(
        ROOT / "reactive" / "flannel.py"), unused=sorted(ONLY_SOME_HOOKS + tuple(HEAVY)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
