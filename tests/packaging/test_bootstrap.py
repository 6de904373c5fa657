"""lib/charms/flannel/bootstrap.py and hooks/hook.template, without pip or network.

The real offline install of a built charm's wheelhouse is in test_built_charm.py.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_bootstrap():
    spec = importlib.util.spec_from_file_location(
        "flannel_bootstrap_under_test", REPO / "lib" / "charms" / "flannel" / "bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bootstrap = _load_bootstrap()


@pytest.fixture
def unit(tmp_path):
    """An agent dir holding a charm dir with a (fake) wheelhouse."""
    charm = tmp_path / "agents" / "unit-flannel-0" / "charm"
    (charm / "wheelhouse").mkdir(parents=True)
    (charm / "wheelhouse.txt").write_text("charms.reactive\n")
    (charm / "wheelhouse" / "charms.reactive-1.5.3.tar.gz").write_bytes(b"sdist bytes")
    (charm / "wheelhouse" / "setuptools-84.2.1.tar.gz").write_bytes(b"setuptools")
    return bootstrap.Layout(str(charm))


def fake_installed_venv(layout, key):
    bindir = Path(layout.python).parent
    bindir.mkdir(parents=True)
    Path(layout.python).write_text("#!/bin/sh\n")
    os.chmod(layout.python, 0o755)
    Path(layout.stamp).write_text(key + "\n")


def test_layout_puts_the_venv_and_log_in_the_agent_dir(unit):
    agent = Path(unit.charm_dir).parent
    assert Path(unit.venv) == agent / ".venv"
    assert Path(unit.log) == agent / "flannel-bootstrap.log"
    assert Path(unit.python) == agent / ".venv" / "bin" / "python3"
    assert Path(unit.lib) == Path(unit.charm_dir) / "lib"


def test_key_is_stable_and_follows_the_wheelhouse(unit):
    key = bootstrap.wheelhouse_key(unit)
    assert key == bootstrap.wheelhouse_key(unit)
    sdist = Path(unit.wheelhouse) / "charms.reactive-1.5.3.tar.gz"
    sdist.write_bytes(b"other sdist bytes")
    changed_content = bootstrap.wheelhouse_key(unit)
    assert changed_content != key
    sdist.rename(sdist.with_name("charms.reactive-1.5.4.tar.gz"))
    renamed = bootstrap.wheelhouse_key(unit)
    assert renamed != changed_content
    Path(unit.requirements).write_text("charms.reactive\netcd3gw\n")
    assert bootstrap.wheelhouse_key(unit) != renamed


def test_key_includes_the_python_version(unit, monkeypatch):
    key = bootstrap.wheelhouse_key(unit)
    monkeypatch.setattr(bootstrap, "_python_tag", lambda version_info=None: "cpython-3.99")
    assert bootstrap.wheelhouse_key(unit) != key


def test_is_installed_needs_the_stamp_and_a_python(unit):
    key = bootstrap.wheelhouse_key(unit)
    assert not bootstrap.is_installed(unit, key)
    fake_installed_venv(unit, key)
    assert bootstrap.is_installed(unit, key)
    assert not bootstrap.is_installed(unit, "0" * 64)
    os.chmod(unit.python, 0o644)  # e.g. a series upgrade removed the base python
    assert not bootstrap.is_installed(unit, key)


def test_ensure_fast_path_runs_no_install(unit, monkeypatch):
    fake_installed_venv(unit, bootstrap.wheelhouse_key(unit))

    def no_install(*args, **kwargs):
        raise AssertionError("install must not run when the venv is current")

    monkeypatch.setattr(bootstrap, "install", no_install)
    monkeypatch.setattr(bootstrap.subprocess, "call", no_install)
    for _ in range(10):
        assert bootstrap.ensure(unit.charm_dir) == unit.python
    assert not Path(unit.log).exists()


def test_ensure_reinstalls_when_the_wheelhouse_changes(unit, monkeypatch):
    fake_installed_venv(unit, bootstrap.wheelhouse_key(unit))
    calls = []

    def fake_install(layout, key, log):
        calls.append(key)
        Path(layout.stamp).write_text(key)

    monkeypatch.setattr(bootstrap, "install", fake_install)
    monkeypatch.setattr(bootstrap, "_hook_tool", lambda *args: None)
    (Path(unit.wheelhouse) / "etcd3gw-2.7.0.tar.gz").write_bytes(b"new")  # upgrade-charm
    bootstrap.ensure(unit.charm_dir)
    assert calls == [bootstrap.wheelhouse_key(unit)]
    assert "installing wheelhouse" in Path(unit.log).read_text()
    bootstrap.ensure(unit.charm_dir)
    assert len(calls) == 1


def test_a_wheelhouse_written_anew_with_the_same_content_is_not_installed_again(
        unit, monkeypatch):
    """upgrade-charm rewrites every file of the charm: the same wheels under
    new times are hashed once, found installed, and from then on stat()
    answers again; a hook that finds the files as recorded reads none."""
    fake_installed_venv(unit, bootstrap.wheelhouse_key(unit))
    monkeypatch.setattr(bootstrap, "install", lambda *a: pytest.fail("nothing to install"))
    assert bootstrap.ensure(unit.charm_dir) == unit.python
    for name in os.listdir(unit.wheelhouse):
        os.utime(os.path.join(unit.wheelhouse, name), ns=(1, 1))
    hashed = []
    key = bootstrap.wheelhouse_key
    monkeypatch.setattr(bootstrap, "wheelhouse_key", lambda layout: hashed.append(1) or key(layout))
    assert bootstrap.ensure(unit.charm_dir) == unit.python
    assert hashed == [1], "files with new times: the content decides"
    for _ in range(3):
        assert bootstrap.ensure(unit.charm_dir) == unit.python
    assert hashed == [1], "the files as recorded: nothing read"


def test_the_recorded_files_go_with_the_venv(unit, monkeypatch):
    """A venv made anew (a failed install, a new Python) has no record: its
    wheelhouse is hashed and compared with its stamp again."""
    fake_installed_venv(unit, bootstrap.wheelhouse_key(unit))
    bootstrap.ensure(unit.charm_dir)
    assert os.path.exists(unit.fingerprint)
    monkeypatch.setattr(bootstrap, "_python_tag", lambda version_info=None: "cpython-3.99")
    calls = []
    monkeypatch.setattr(bootstrap, "install", lambda layout, key, log: calls.append(key)
                        or Path(layout.stamp).write_text(key))
    monkeypatch.setattr(bootstrap, "_hook_tool", lambda *args: None)
    bootstrap.ensure(unit.charm_dir)
    assert calls == [bootstrap.wheelhouse_key(unit)], "another Python: installed again"


def test_a_record_that_cannot_be_written_costs_a_hash_not_the_hook(unit, monkeypatch):
    """A full disk: the venv still serves the hook, nothing half-written stays."""
    fake_installed_venv(unit, bootstrap.wheelhouse_key(unit))

    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bootstrap.os, "replace", disk_full)
    monkeypatch.setattr(bootstrap, "install", lambda *a: pytest.fail("nothing to install"))
    assert bootstrap.ensure(unit.charm_dir) == unit.python
    assert sorted(os.listdir(unit.venv)) == sorted(["bin", bootstrap.STAMP_NAME])


DISTUTILS_ALONE = """
import sys
from charms.flannel.bootstrap import distutils_from_setuptools
distutils_from_setuptools()
from distutils.version import LooseVersion
import distutils
print('setuptools' in sys.modules, distutils.__file__.endswith('setuptools/_distutils/__init__.py'),
      LooseVersion('1.10') > LooseVersion('1.9'))
"""


def test_distutils_comes_from_setuptools_without_importing_setuptools(tmp_path):
    """Python 3.12's hooks: charmhelpers' `from distutils.version import
    LooseVersion` answered by setuptools' own copy, setuptools itself never
    imported (here one whose import fails)."""
    package = tmp_path / "setuptools"
    (package / "_distutils").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('setuptools imported')\n")
    (package / "_distutils" / "__init__.py").write_text("")
    (package / "_distutils" / "version.py").write_text(
        "class LooseVersion:\n"
        "    def __init__(self, v): self.v = [int(p) for p in v.split('.')]\n"
        "    def __gt__(self, other): return self.v > other.v\n")
    import subprocess
    out = subprocess.run([sys.executable, "-c", DISTUTILS_ALONE], capture_output=True, text=True,
                         env={"PYTHONPATH": f"{tmp_path}:{REPO / 'lib'}"})
    assert out.stdout.split() == ["False", "True", "True"], out.stdout + out.stderr


def test_failed_install_raises_with_the_log_tail_and_leaves_no_stamp(unit, monkeypatch):
    monkeypatch.setattr(bootstrap, "_hook_tool", lambda *args: None)
    monkeypatch.setattr(bootstrap, "ensure_venv_support", lambda log: [])

    def failing_venv(layout, key, log):
        bootstrap._run([sys.executable, "-c", "import sys; print('pip says no'); sys.exit(3)"],
                       log, what="installing the wheelhouse")

    monkeypatch.setattr(bootstrap, "install", failing_venv)
    with pytest.raises(bootstrap.BootstrapError) as e:
        bootstrap.ensure(unit.charm_dir)
    message = str(e.value)
    assert "installing the wheelhouse failed (exit code 3)" in message
    assert "pip says no" in message and unit.log in message
    assert "FAILED" in Path(unit.log).read_text()
    assert not os.path.exists(unit.stamp)


def test_install_without_a_wheelhouse_says_how_to_build(tmp_path):
    layout = bootstrap.Layout(str(tmp_path / "charm"))
    with open(tmp_path / "log", "w") as log:
        with pytest.raises(bootstrap.BootstrapError, match="scripts/build-charm"):
            bootstrap.install(layout, "k", log)


def test_clean_env_isolates_pip_from_the_machine(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_INDEX_URL", "https://example.invalid/simple")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv(bootstrap.REEXEC_ENV, "/x")
    env = bootstrap._clean_env({"EXTRA": "1"})
    assert not any(k in env for k in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PYTHONPATH",
                                      bootstrap.REEXEC_ENV))
    assert env["PIP_CONFIG_FILE"] == os.devnull
    assert env["EXTRA"] == "1"
    assert env["PATH"] == os.environ["PATH"]


def test_venv_support_present_means_no_apt(monkeypatch):
    monkeypatch.setattr(bootstrap, "missing_modules", lambda names=(): [])
    monkeypatch.setattr(bootstrap, "apt_install", lambda *a: pytest.fail("apt must not run"))
    assert bootstrap.ensure_venv_support(open(os.devnull, "w")) == []


def test_missing_ensurepip_installs_python3_venv_and_whatever_else_is_missing(monkeypatch):
    state = {"missing": {"ensurepip", "pip", "wheel"}}
    installed = []
    monkeypatch.setattr(bootstrap, "missing_modules",
                        lambda names=(): [n for n in names if n in state["missing"]])

    def fake_apt(packages, log):
        installed.append(packages)
        state["missing"].clear()

    monkeypatch.setattr(bootstrap, "apt_install", fake_apt)
    got = bootstrap.ensure_venv_support(open(os.devnull, "w"))
    assert got == ["python3-pip", "python3-venv", "python3-wheel"]
    assert installed == [got]


def test_still_no_ensurepip_after_apt_is_an_error(monkeypatch):
    monkeypatch.setattr(bootstrap, "missing_modules", lambda names=(): ["ensurepip"])
    monkeypatch.setattr(bootstrap, "apt_install", lambda packages, log: None)
    with pytest.raises(bootstrap.BootstrapError, match="still cannot create a venv"):
        bootstrap.ensure_venv_support(open(os.devnull, "w"))


def test_apt_install_without_apt_get(monkeypatch):
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: None)
    with pytest.raises(bootstrap.BootstrapError, match="no apt-get"):
        bootstrap.apt_install(["python3-venv"], open(os.devnull, "w"))


def test_apt_install_retries_after_update(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: "/usr/bin/" + name)

    def fake_run(cmd, log, env=None, what=None):
        assert cmd[:3] == ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
        calls.append(cmd[3])
        assert env["DEBIAN_FRONTEND"] == "noninteractive"
        if cmd[3] == "install" and len(calls) == 1:
            raise bootstrap.BootstrapError("stale lists")

    monkeypatch.setattr(bootstrap, "_run", fake_run)
    bootstrap.apt_install(["python3-venv"], open(tmp_path / "log", "w"))
    assert calls == ["install", "update", "install"]


def test_missing_modules_really_probes():
    assert bootstrap.missing_modules(("os", "no_such_module_flannel")) == ["no_such_module_flannel"]


def test_wheelhouse_has_matches_normalised_names(unit):
    assert bootstrap._wheelhouse_has(unit, "setuptools")
    assert bootstrap._wheelhouse_has(unit, "charms-reactive")
    assert not bootstrap._wheelhouse_has(unit, "flit_core")


# --- hooks/hook.template -----------------------------------------------------------

def render_hook(group):
    """As charm-build does: format() with the hook group ("hook", or an endpoint)."""
    return (REPO / "hooks" / "hook.template").read_text().format(group)


def test_hook_template_renders_and_compiles():
    for group in ("hook", "etcd", "nrpe-external-master"):
        text = render_hook(group)
        assert text.startswith("#!/bin/sh\n")
        assert 'for its "{}" hooks'.format(group) in text
        compile(text, group, "exec")


def test_hook_uses_only_the_standard_library():
    import ast

    tree = ast.parse(render_hook("hook"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names)
    # what the bootstrap imports once it runs in the venv (charms.reactive, the real
    # pkg_resources if anything but iter_entry_points is asked of it; the
    # benchmark's profile, standard library itself, when asked for)
    profile = "charms.flannel.hook_profile"
    in_the_venv = {"charms.reactive", "pkg_resources", profile}
    for path in ("bootstrap.py", "hook_profile.py"):
        tree = ast.parse((REPO / "lib" / "charms" / "flannel" / path).read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names
                    if alias.name not in in_the_venv}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module not in in_the_venv}
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, path


def test_hook_reexecs_into_the_venv_and_runs_reactive(unit, tmp_path):
    """The rendered hook, run for real, with a stand-in venv python.

    The stand-in records its argv and environment instead of running
    charms.reactive: the hook must exec it with the hook's own path as
    argv[1] (charms.reactive takes the hook name from it).
    """
    charm = Path(unit.charm_dir)
    (charm / "hooks").mkdir()
    hook = charm / "hooks" / "config-changed"
    hook.write_text(render_hook("hook"))
    hook.chmod(0o755)
    (charm / "lib" / "charms" / "flannel").mkdir(parents=True)
    (charm / "lib" / "charms" / "flannel" / "bootstrap.py").write_bytes(
        (REPO / "lib" / "charms" / "flannel" / "bootstrap.py").read_bytes())
    fake_installed_venv(unit, "placeholder")
    record = tmp_path / "exec.txt"
    Path(unit.python).write_text(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" \"VENV=$FLANNEL_BOOTSTRAP_VENV\" > {}\n".format(record))
    # The key depends on the python running the hook: compute it there.
    import subprocess

    key = subprocess.run(
        [sys.executable, "-c",
         "import importlib.util, sys; s = importlib.util.spec_from_file_location('b', sys.argv[1]);"
         "m = importlib.util.module_from_spec(s); s.loader.exec_module(m);"
         "print(m.wheelhouse_key(m.Layout(sys.argv[2])))",
         str(charm / "lib" / "charms" / "flannel" / "bootstrap.py"), str(charm)],
        check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    Path(unit.stamp).write_text(key)
    env = {k: v for k, v in os.environ.items() if k != "CHARM_DIR"}
    run = subprocess.run([sys.executable, str(hook), "extra-arg"], env=env, cwd=str(charm),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 0, run.stdout
    assert run.stdout == "", "the hook must not print when nothing is installed"
    assert record.read_text().splitlines() == [str(hook), "extra-arg", "VENV=" + unit.venv]


def hook_unit(unit, tmp_path):
    """A unit with the rendered config-changed hook and the real bootstrap;
    the machine's python3 (this one) first on a PATH of the test's own."""
    charm = Path(unit.charm_dir)
    (charm / "hooks").mkdir()
    hook = charm / "hooks" / "config-changed"
    hook.write_text(render_hook("hook"))
    hook.chmod(0o755)
    (charm / "lib" / "charms" / "flannel").mkdir(parents=True)
    (charm / "lib" / "charms" / "flannel" / "bootstrap.py").write_bytes(
        (REPO / "lib" / "charms" / "flannel" / "bootstrap.py").read_bytes())
    machine_bin = tmp_path / "machine-bin"
    machine_bin.mkdir()
    (machine_bin / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("CHARM_DIR", "JUJU_CHARM_DIR")}
    env["PATH"] = "{}:{}".format(machine_bin, os.environ["PATH"])
    return hook, env


def test_a_hook_goes_straight_to_the_venvs_python_once_it_holds_the_wheelhouse(unit, tmp_path):
    """Run as Juju runs it (exec'd, its sh part first): with the venv in
    place and the wheelhouse as the venv recorded it, the venv's python3
    runs the hook itself, the machine's python3 is never started."""
    import subprocess

    hook, env = hook_unit(unit, tmp_path)
    fake_installed_venv(unit, "placeholder")
    bootstrap._record_fingerprint(unit, bootstrap.wheelhouse_fingerprint(unit))
    record = tmp_path / "exec.txt"
    Path(unit.python).write_text(   # a venv python that records how it was started
        "#!/bin/sh\nprintf '%s\\n' \"$@\" \"VENV=$VIRTUAL_ENV\" \"PATH=$PATH\" "
        "\"REEXEC=$FLANNEL_BOOTSTRAP_VENV\" > {}\n".format(record))
    run = subprocess.run([str(hook), "extra-arg"], env=env, cwd=str(unit.charm_dir),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 0, run.stdout
    lines = record.read_text().splitlines()
    assert lines[:3] == [str(hook), "extra-arg", "VENV=" + unit.venv]
    assert lines[3].startswith("PATH={}/bin:".format(unit.venv)) and lines[4] == "REEXEC="


def test_a_venv_python_that_finds_the_wheelhouse_changed_hands_back_to_the_machines(
        unit, tmp_path):
    """upgrade-charm brought another wheelhouse: the venv's python, started
    by the hook's sh part, leaves the install to the machine's python3 (PATH
    without the venv), which installs and hands the hook back to the venv."""
    import subprocess

    hook, env = hook_unit(unit, tmp_path)
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('b', "
            "sys.argv[1]); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "m.Layout.__init__.__globals__['sys'].prefix = sys.argv[2]; "
            "m._run_in_venv(sys.argv[3], sys.argv[4], sys.argv[4:], 'x')")
    record = tmp_path / "exec.txt"
    machine_python = tmp_path / "machine-bin" / "python3"
    machine_python.unlink()
    machine_python.write_text("#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" \"VENV=$VIRTUAL_ENV\" > {}\n"
                              .format(record))
    machine_python.chmod(0o755)
    fake_installed_venv(unit, "placeholder")   # and no fingerprint: the wheelhouse changed
    env["PATH"] = "{}/bin:{}".format(unit.venv, env["PATH"])   # as the sh part set it
    env["VIRTUAL_ENV"] = unit.venv
    run = subprocess.run([sys.executable, "-c", code,
                          str(Path(unit.charm_dir) / "lib" / "charms" / "flannel" / "bootstrap.py"),
                          unit.venv, unit.charm_dir, str(hook), "extra-arg"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run.returncode == 0, run.stdout
    assert record.read_text().splitlines() == [
        str(machine_python), str(hook), "extra-arg", "VENV="]


# --- the pure-wheel install (what scripts/build-charm ships) --------------------------

def make_wheel(directory: Path, dist: str, files: dict, tag: str = "py3-none-any") -> Path:
    """A real wheel: ``files`` ({archive name: text}) plus its dist-info."""
    import zipfile

    version = "1.0"
    path = directory / "{}-{}-{}.whl".format(dist, version, tag)
    info = "{}-{}.dist-info/".format(dist, version)
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: {}\nVersion: {}\n".format(
            dist, version))
        z.writestr(info + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {}\n".format(
            tag))
        z.writestr(info + "RECORD", "")
    return path


@pytest.fixture
def wheel_unit(tmp_path):
    charm = tmp_path / "agents" / "unit-flannel-0" / "charm"
    wheelhouse = charm / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    (charm / "wheelhouse.txt").write_text("charms.reactive\n")
    make_wheel(wheelhouse, "charms.reactive", {
        "charms/__init__.py": "",
        "charms/reactive/__init__.py": "WHERE = 'venv'\n"})
    make_wheel(wheelhouse, "tool", {"tool.py": "X = 1\n",
                                    "tool-1.0.data/scripts/tool-run": "#!/bin/sh\necho hi\n",
                                    "tool-1.0.data/purelib/tool_extra.py": "Y = 2\n"},
               tag="py2.py3-none-any")
    return bootstrap.Layout(str(charm))


def test_pure_wheels_only_when_every_file_is_a_pure_wheel(wheel_unit):
    wheels = bootstrap.pure_wheels(wheel_unit)
    assert [Path(w).name for w in wheels] == ["charms.reactive-1.0-py3-none-any.whl",
                                              "tool-1.0-py2.py3-none-any.whl"]
    make_wheel(Path(wheel_unit.wheelhouse), "wrapt", {"wrapt/__init__.py": ""},
               tag="cp311-cp311-linux_x86_64")
    assert bootstrap.pure_wheels(wheel_unit) is None, "a platform wheel needs pip's choice"
    for name in os.listdir(wheel_unit.wheelhouse):
        if "linux" in name:
            os.unlink(os.path.join(wheel_unit.wheelhouse, name))
    (Path(wheel_unit.wheelhouse) / "pbr-6.1.tar.gz").write_bytes(b"sdist")
    assert bootstrap.pure_wheels(wheel_unit) is None, "an sdist needs building"


def test_wheels_install_into_a_venv_without_pip_or_apt(wheel_unit, monkeypatch):
    """A real venv made by this python; the wheels' modules import there, the
    .data dirs land where the wheel spec says, and neither pip nor apt runs."""
    import subprocess

    monkeypatch.setattr(bootstrap, "_hook_tool", lambda *args: None)
    monkeypatch.setattr(bootstrap, "apt_install", lambda *a: pytest.fail("apt must not run"))
    python = bootstrap.ensure(wheel_unit.charm_dir)
    assert python == wheel_unit.python
    probe = subprocess.run(
        [python, "-c", "import sys, charms.reactive, tool, tool_extra, importlib.util; "
                       "print(sys.prefix, charms.reactive.WHERE, tool.X, tool_extra.Y, "
                       "importlib.util.find_spec('pip') is None)"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")
    assert probe.stdout.split() == [wheel_unit.venv, "venv", "1", "2", "True"], probe.stdout
    script = Path(wheel_unit.venv) / "bin" / "tool-run"
    assert script.is_file() and os.access(script, os.X_OK)
    log = Path(wheel_unit.log).read_text()
    assert "unpacked charms.reactive-1.0-py3-none-any.whl" in log
    assert "pip install" not in log
    assert bootstrap.is_installed(wheel_unit, bootstrap.wheelhouse_key(wheel_unit))


def test_a_wheel_cannot_write_outside_the_venv(wheel_unit, tmp_path):
    evil = make_wheel(tmp_path, "evil", {"../../../../../escaped.py": "X = 1\n"})
    with pytest.raises(bootstrap.BootstrapError, match="outside the venv"):
        bootstrap.unpack_wheel(str(evil), str(tmp_path / "venv"))
    assert not list(tmp_path.parent.rglob("escaped.py"))
