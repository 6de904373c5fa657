"""The built charm: its contents, charm-proof, its .charm zip, and its hooks'
offline install of the wheelhouse.

The install runs the built charm's own hooks/install the way a unit agent
would (cwd and CHARM_DIR the charm dir, inside an agent dir), with:

- no network at all: `unshare --net` gives the hook a network namespace with
  only a loopback that is down, so pip can only use the charm's wheelhouse;
- an Ubuntu /etc/os-release bind-mounted in a private mount namespace
  (`unshare --mount`), because charmhelpers refuses to import on Debian;
- no C compiler (CC=/bin/false), as on an Ubuntu cloud image: the wheelhouse
  is pure-Python wheels (scripts/pure-wheelhouse), unpacked without pip;
- stand-in hook tools that answer "nothing related, no config", and a probe
  handler in place of reactive/flannel.py (whose handlers need a real model),
  so the hook shows that charms.reactive.main() ran in the venv.

Needs root (unshare, mount). Marked slow: a cold build takes minutes; each
interpreter's first install takes about a second.
"""

import json
import os
import shutil
import stat
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from sandbox import ubuntu

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.build]

NOT_CHARM = ("sandbox", "tests", "scripts", "docs", ".ci", ".github", "tox.ini",
             "requirements-dev.txt", "build", "interfaces", "overlays", "charmcraft.yaml",
             ".gitignore", ".git")

OS_RELEASE = {series: ubuntu.os_release(series) for series in ubuntu.RELEASES}

HOOK_TOOL = """#!/bin/sh
# Stand-in hook tool: records the call, answers "nothing there".
echo "$(basename "$0") $*" >> "$FLANNEL_TEST_TOOLS_LOG"
case "$(basename "$0")" in
  relation-ids|relation-list) echo '[]' ;;
  config-get|relation-get|leader-get|goal-state|action-get) echo '{}' ;;
  is-leader) echo 'false' ;;
esac
"""
HOOK_TOOLS = ("relation-ids", "relation-list", "relation-get", "relation-set", "config-get",
              "juju-log", "status-set", "status-get", "application-version-set", "is-leader",
              "leader-get", "leader-set", "goal-state", "open-port", "close-port", "unit-get",
              "action-get", "resource-get", "network-get", "opened-ports")

PROBE_HANDLER = """
import os
from charms.reactive import hook
from charmhelpers.core import hookenv


@hook('{install,config-changed,upgrade-charm}')
def probe():
    import sys
    import distutils
    with open(os.environ['FLANNEL_TEST_PROBE'], 'a') as f:
        f.write('{} {} {} setuptools-imported={} distutils={}\\n'.format(
            hookenv.hook_name(), sys.prefix, sys.version.split()[0],
            'setuptools' in sys.modules, distutils.__file__))
"""


def interpreters():
    """(series, python) pairs to install with: the PATH python3, and each
    release's own (jammy's 3.10, noble's 3.12, resolute's 3.14) where this
    host has it or sandbox.cpython builds it (ubuntu.python_for)."""
    found = [("jammy", shutil.which("python3"))]
    for series in ubuntu.RELEASES:
        python = ubuntu.python_for(series)
        if python:
            found.append((series, python))
    return found


def python_id(param):
    series, python = param
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    return "py{}-{}".format(out, series)


def can_unshare():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--mount", "--net", "true"]).returncode == 0


needs_unshare = pytest.mark.skipif(not can_unshare(),
                                   reason="needs root and unshare --mount --net")


# --- contents ------------------------------------------------------------------------

def test_charm_has_its_hooks_and_interfaces(built_charm):
    hooks = built_charm / "hooks"
    # remove: the last hook of a unit that never started (Juju runs stop only
    # for a started one); charm-build does not make it, build-charm does
    for name in ("install", "config-changed", "start", "stop", "remove", "upgrade-charm",
                 "update-status", "leader-elected", "pre-series-upgrade", "post-series-upgrade"):
        assert os.access(hooks / name, os.X_OK), name
    for endpoint in ("etcd", "cni", "nrpe-external-master"):
        for event in ("joined", "changed", "departed", "broken"):
            assert os.access(hooks / "{}-relation-{}".format(endpoint, event), os.X_OK)
    assert (hooks / "install").read_text().startswith("#!/bin/sh\n")
    assert 'for its "hook" hooks' in (hooks / "install").read_text()
    assert 'for its "etcd" hooks' in (hooks / "etcd-relation-changed").read_text()
    assert (hooks / "relations" / "etcd" / "requires.py").is_file()
    assert (hooks / "relations" / "kubernetes-cni" / "requires.py").is_file()
    assert (hooks / "relations" / "nrpe-external-master" / "provides.py").is_file()
    for name in ("metadata.yaml", "config.yaml", "layer.yaml", "wheelhouse.txt",
                 "lib/charms/flannel/bootstrap.py", ".build.manifest"):
        assert (built_charm / name).is_file(), name
    # the actions (actions.yaml), each an executable as Juju runs it
    import yaml
    actions = yaml.safe_load((built_charm / "actions.yaml").read_text())
    assert sorted(actions) == ["check-network", "debug", "list-leases"]
    for name in actions:
        assert os.access(built_charm / "actions" / name, os.X_OK), name


def test_manifest_declares_every_base_on_every_arch_and_metadata_no_series(built_charm):
    """Juju 4 refuses a charm whose manifest has no bases, and knows no
    series: the bases are charmcraft.yaml's platforms."""
    import yaml

    bases = yaml.safe_load((built_charm / "manifest.yaml").read_text())["bases"]
    assert [(b["name"], b["channel"]) for b in bases] == [
        ("ubuntu", "22.04"), ("ubuntu", "24.04"), ("ubuntu", "26.04")]
    assert all(b["architectures"] == ["amd64", "arm64", "s390x"] for b in bases)
    assert "series" not in yaml.safe_load((built_charm / "metadata.yaml").read_text())


def test_charm_has_nothing_that_is_not_charm(built_charm):
    present = [name for name in NOT_CHARM if (built_charm / name).exists()]
    assert present == []
    assert not list(built_charm.rglob("__pycache__"))


def test_wheelhouse_is_pure_python_wheels(built_charm):
    """One py3-none-any wheel per dependency: it installs on every Python 3 and
    architecture the charm supports, by unpacking, with no compiler; no wheel
    holds compiled code (MarkupSafe, PyYAML and wrapt took their fallbacks)."""
    files = sorted(p.name for p in (built_charm / "wheelhouse").iterdir())
    assert files, "empty wheelhouse"
    assert [f for f in files if not f.endswith("-py3-none-any.whl")
            and not f.endswith("-py2.py3-none-any.whl")] == []
    names = {f.split("-", 1)[0].lower().replace("_", "-").replace(".", "-") for f in files}
    for wanted in ("charms-reactive", "charmhelpers", "charms-templating-jinja2", "jinja2",
                   "markupsafe", "etcd3gw", "futurist", "urllib3", "setuptools", "pyyaml",
                   "wrapt"):
        assert wanted in names, wanted
    assert len(names) == len(files), "one wheel per distribution"
    assert [f for f in files if f.lower().startswith("cython")] == []
    for name in files:
        with zipfile.ZipFile(built_charm / "wheelhouse" / name) as z:
            compiled = [m for m in z.namelist() if m.endswith((".so", ".pyd"))]
        assert compiled == [], name


def test_charm_proof_is_clean(built_charm):
    cache = Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))
    proof = cache / "charm-tools" / "bin" / "charm-proof"
    proof = str(proof) if proof.exists() else shutil.which("charm-proof")
    if not proof:
        pytest.skip("charm-proof is not installed")
    run = subprocess.run([proof, str(built_charm)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    bad = [line for line in run.stdout.splitlines() if line.startswith(("W:", "E:"))]
    assert bad == [], run.stdout
    # Charmhub shows the icon first; without it, proof says "I: No icon.svg file."
    assert "icon.svg" not in run.stdout, run.stdout


def test_the_icon_is_a_100_pixel_svg(built_charm):
    import xml.etree.ElementTree as ElementTree
    root = ElementTree.parse(built_charm / "icon.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert (root.get("width"), root.get("height"), root.get("viewBox")) == \
        ("100", "100", "0 0 100 100")


def test_charm_zip_matches_the_dir_and_keeps_modes(built_charm):
    archive = built_charm.parent / "flannel.charm"
    assert archive.is_file()
    files = {str(p.relative_to(built_charm)) for p in built_charm.rglob("*") if p.is_file()}
    with zipfile.ZipFile(archive) as z:
        assert set(z.namelist()) == files
        assert "metadata.yaml" in files and "hooks/install" in files
        mode = z.getinfo("hooks/install").external_attr >> 16
        assert mode & stat.S_IXUSR, oct(mode)


# --- the offline install, as a unit agent would run the hooks -------------------------

def make_unit(built_charm, root):
    """A unit agent dir holding a copy of the charm, with the probe handler."""
    charm = root / "agents" / "unit-flannel-0" / "charm"
    shutil.copytree(built_charm, charm, symlinks=True)
    reactive = charm / "reactive"
    if reactive.exists():
        shutil.move(str(reactive), str(root / "reactive.real"))
    reactive.mkdir()
    (reactive / "probe.py").write_text(PROBE_HANDLER)
    tools = root / "tools"
    tools.mkdir()
    for name in HOOK_TOOLS:
        (tools / name).write_text(HOOK_TOOL)
        (tools / name).chmod(0o755)
    return charm


def in_ubuntu_without_network(cmd, os_release, env, cwd):
    """Run ``cmd`` with no network and an Ubuntu /etc/os-release."""
    wrapper = ["unshare", "--mount", "--net", "--", "sh", "-c",
               'mount --bind "$1" /etc/os-release && shift && exec "$@"', "sh", str(os_release)]
    return subprocess.run(wrapper + [str(c) for c in cmd], env=env, cwd=str(cwd),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@needs_unshare
@pytest.mark.parametrize("series_python", interpreters(), ids=python_id)
def test_install_hook_bootstraps_offline_and_runs_reactive(built_charm, tmp_path, series_python):
    series, python = series_python
    charm = make_unit(built_charm, tmp_path)
    agent = charm.parent
    os_release = tmp_path / "os-release"
    os_release.write_text(OS_RELEASE[series])
    probe = tmp_path / "probe.txt"
    env = dict(os.environ)  # PIP_FIND_LINKS and friends included: the bootstrap must ignore them
    # the base's python3 is the machine's: first on PATH, as Juju runs hooks
    # (a wrapper that logs each start of the machine's python3)
    machine_bin = tmp_path / "machine-bin"
    machine_bin.mkdir()
    starts = tmp_path / "machine-python.log"
    (machine_bin / "python3").write_text('#!/bin/sh\necho "$@" >> {}\nexec {} "$@"\n'.format(
        starts, python))
    (machine_bin / "python3").chmod(0o755)
    env.update(CHARM_DIR=str(charm), JUJU_CHARM_DIR=str(charm), JUJU_UNIT_NAME="flannel/0",
               JUJU_MODEL_NAME="test", JUJU_AVAILABILITY_ZONE="", FLANNEL_TEST_PROBE=str(probe),
               FLANNEL_TEST_TOOLS_LOG=str(tmp_path / "tools.log"), CC="/bin/false",
               PATH="{}:{}:{}".format(machine_bin, tmp_path / "tools", os.environ["PATH"]))
    env.pop("JUJU_HOOK_NAME", None)

    started = time.monotonic()
    # exec'd as Juju does: the hook's sh part finds no venv and starts python3
    run = in_ubuntu_without_network([charm / "hooks" / "install"], os_release, env, charm)
    first = time.monotonic() - started
    log_file = agent / "flannel-bootstrap.log"
    log = log_file.read_text() if log_file.exists() else ""
    assert run.returncode == 0, run.stdout + "\n--- bootstrap log tail:\n" + log[-6000:]
    assert run.stdout == "", "pip's output belongs in the bootstrap log, not the hook's"
    venv = agent / ".venv"
    py_version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                                stdout=subprocess.PIPE, text=True).stdout.strip()
    hook, prefix, version, setuptools_imported, distutils_file = probe.read_text().split()
    assert [hook, prefix, version] == ["install", str(venv), py_version]
    # charmhelpers' distutils is the standard library's where it has one
    # (3.10, 3.11), else setuptools' copy loaded alone (bootstrap.
    # distutils_from_setuptools): no hook imports all of setuptools for it
    assert setuptools_imported == "setuptools-imported=False", probe.read_text()
    in_stdlib = tuple(map(int, py_version.split(".")[:2])) < (3, 12)
    assert ("/setuptools/_distutils/" in distutils_file) is not in_stdlib, distutils_file
    assert log.count("installing wheelhouse") == 1 and "done in" in log
    assert "Downloading" not in log
    assert "unpacked charms_reactive-" in log and "pip install" not in log, "unpacked, no pip"
    print("\nfirst install with {} ({}): {:.1f}s".format(python, py_version, first))

    # The venv has everything the charm imports (charmhelpers needs the Ubuntu identity).
    check = ("import charms.reactive, charmhelpers.core.host, charms.templating.jinja2, "
             "etcd3gw, jinja2, markupsafe, yaml, requests, urllib3; "
             "from importlib.metadata import version as v; import json; "
             "print(json.dumps({n: v(n) for n in ('charms.reactive', 'charmhelpers', 'Jinja2', "
             "'MarkupSafe', 'etcd3gw', 'PyYAML', 'urllib3', 'futurist')}))")
    run = in_ubuntu_without_network([venv / "bin" / "python3", "-c", check], os_release, env, charm)
    assert run.returncode == 0, run.stdout
    versions = json.loads(run.stdout.strip().splitlines()[-1])
    assert versions["Jinja2"].startswith("2.") and versions["MarkupSafe"].startswith("2.0")

    # A later hook finds the venv current: no pip, and quick; its sh part starts
    # the venv's python3 alone, not the machine's
    assert starts.read_text().splitlines() == [str(charm / "hooks" / "install")]
    started = time.monotonic()
    run = in_ubuntu_without_network([charm / "hooks" / "config-changed"], os_release, env, charm)
    again = time.monotonic() - started
    assert run.returncode == 0, run.stdout
    assert run.stdout == "", "a hook with nothing to do prints nothing (no pkg_resources warning)"
    assert probe.read_text().splitlines()[-1].split()[0] == "config-changed"
    assert (agent / "flannel-bootstrap.log").read_text().count("installing wheelhouse") == 1
    assert starts.read_text().splitlines() == [str(charm / "hooks" / "install")], \
        "the machine's python3 started for config-changed"
    print("config-changed with the venv in place: {:.2f}s".format(again))


@needs_unshare
def test_reactive_flannel_imports_in_the_unit_venv(built_charm, tmp_path):
    """reactive/flannel.py, as built, imports with only the wheelhouse installed."""
    if not (built_charm / "reactive" / "flannel.py").exists():
        pytest.skip("the built charm has no reactive/flannel.py")
    charm = make_unit(built_charm, tmp_path)
    shutil.rmtree(charm / "reactive")
    shutil.copytree(tmp_path / "reactive.real", charm / "reactive")
    os_release = tmp_path / "os-release"
    os_release.write_text(OS_RELEASE["jammy"])
    env = dict(os.environ, CHARM_DIR=str(charm), JUJU_UNIT_NAME="flannel/0",
               FLANNEL_TEST_TOOLS_LOG=str(tmp_path / "tools.log"),
               PATH="{}:{}".format(tmp_path / "tools", os.environ["PATH"]))
    bootstrap = ("import importlib.util, sys; s = importlib.util.spec_from_file_location("
                 "'b', 'lib/charms/flannel/bootstrap.py'); m = importlib.util.module_from_spec(s);"
                 " s.loader.exec_module(m); print(m.ensure('.'))")
    run = in_ubuntu_without_network([shutil.which("python3"), "-c", bootstrap],
                                    os_release, env, charm)
    assert run.returncode == 0, run.stdout
    venv_python = run.stdout.strip().splitlines()[-1]
    imp = "import sys; sys.path[:0] = ['.', 'lib']; import reactive.flannel"
    run = in_ubuntu_without_network([venv_python, "-c", imp], os_release, env, charm)
    assert run.returncode == 0, run.stdout


def test_the_benchmarks_bare_charm_is_the_framework_alone(built_charm, tmp_path):
    """sandbox.bench's bare charm: flannel's own hooks and bootstrap, its
    endpoints, and only charms.reactive's closure as wheelhouse."""
    from sandbox.bench import make_bare_charm

    bare = make_bare_charm(built_charm, tmp_path / "bare")
    for hook in ("install", "update-status", "cni-relation-joined", "stop"):
        assert (bare / "hooks" / hook).read_bytes() == (built_charm / "hooks" / hook).read_bytes()
    boot = Path("lib/charms/flannel/bootstrap.py")
    assert (bare / boot).read_bytes() == (built_charm / boot).read_bytes()
    wheels = {p.name.split("-", 1)[0].lower() for p in (bare / "wheelhouse").iterdir()}
    assert {"charms_reactive", "charmhelpers", "pyyaml", "setuptools"} <= wheels
    assert not wheels & {"etcd3gw", "futurist", "requests", "charms_templating_jinja2"}
    import yaml

    meta = yaml.safe_load((bare / "metadata.yaml").read_text())
    flannel = yaml.safe_load((built_charm / "metadata.yaml").read_text())
    assert meta["requires"] == flannel["requires"] and meta["subordinate"] is True
    assert list((bare / "reactive").iterdir()) == [bare / "reactive" / "bare.py"]
