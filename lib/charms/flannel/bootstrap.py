"""Install the charm's Python dependencies on the unit, then run the hook.

STANDARD LIBRARY ONLY: this module runs at the start of every hook, before any
of the charm's dependencies exist, under the machine's own python3 (or the
venv's: a hook's sh part starts the venv's python3 directly once it exists,
and step 2 runs there, handing back to the machine's python3 for step 3).

Every hook (hooks/hook.template) calls :func:`run_hook`, which:

1. computes a key from the wheelhouse the charm ships (``wheelhouse.txt`` and
   every file in ``wheelhouse/``, by content) and the Python version;
2. if the unit's venv (``$CHARM_DIR/../.venv``, in the unit's agent dir, so
   it survives upgrade-charm and goes away with the unit) carries that key,
   goes straight on, no pip; the wheelhouse is read (5 MB hashed) only when
   its files' names, sizes or times differ from what the venv recorded at
   install (:func:`wheelhouse_fingerprint`): a hook's check is one listdir
   and a stat per file;
3. otherwise (first hook, upgrade-charm with a different wheelhouse, a series
   upgrade that changed python3) recreates the venv and installs the
   wheelhouse into it OFFLINE. scripts/build-charm ships pure-Python wheels
   only (``py3-none-any``, scripts/pure-wheelhouse): they are unpacked into a
   venv made without pip, in well under a second, with no pip, compiler or
   apt. A wheelhouse that still holds sdists (a plain ``charm-build``) is
   installed with pip (``pip install --no-index --find-links wheelhouse``),
   building each sdist; if this python3 then cannot create venvs with pip (no
   ensurepip: Debian/Ubuntu ship it in python3-venv), it apt-get installs
   what is missing first. What the install did goes to
   ``$CHARM_DIR/../flannel-bootstrap.log``, never to the hook's output;
4. re-executes the hook with the venv's python, where it hands over to
   ``charms.reactive.main()`` (with ``lib/`` on sys.path).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import types
import warnings

# hashlib, tempfile, venv and zipfile are imported where an install needs
# them: every hook loads this module twice (the machine's python3, then the
# venv's), and most hooks install nothing.

#: Bump to force every unit to reinstall when the install procedure changes.
FORMAT = "1"
VENV_DIRNAME = ".venv"
STAMP_NAME = ".flannel-wheelhouse-key"
FINGERPRINT_NAME = ".flannel-wheelhouse-files"
LOG_NAME = "flannel-bootstrap.log"
LOCK_NAME = ".flannel-bootstrap.lock"
#: Set in the environment of the re-executed hook (value: the venv path).
REEXEC_ENV = "FLANNEL_BOOTSTRAP_VENV"
# A directory: the hook appends its profile there (charms.flannel.hook_profile)
PROFILE_ENV = "FLANNEL_HOOK_PROFILE"
#: Set ("1") in the environment of the re-executed hook when this hook's
#: bootstrap installed, and so set a maintenance status the charm must replace.
INSTALLED_ENV = "FLANNEL_BOOTSTRAP_INSTALLED"

#: Build backends installed first, each built from its own sdist in the
#: wheelhouse (they bootstrap themselves, so pip's build isolation works
#: offline). Everything else is then built with --no-build-isolation against
#: them, so no build dependency (Cython, say) ever has to come from anywhere.
BUILD_BACKENDS = ("setuptools", "wheel", "flit_core", "pbr")

#: What to apt-get install when the base python lacks a module. Only acted on
#: when python3 cannot create a venv at all (no ensurepip / venv).
APT_PACKAGES = {
    "ensurepip": "python3-venv",
    "venv": "python3-venv",
    "pip": "python3-pip",
    "setuptools": "python3-setuptools",
    "wheel": "python3-wheel",
}

#: Seconds apt-get waits for the dpkg lock.
APT_LOCK_TIMEOUT = 300
#: Lines of a failing command's output quoted in the exception.
TAIL_LINES = 25


class BootstrapError(RuntimeError):
    """The charm's dependencies could not be installed; the message says why."""


class Layout:
    """Where everything the bootstrap touches lives, for one charm dir."""

    def __init__(self, charm_dir: str, venv_dir: str | None = None):
        self.charm_dir = os.path.abspath(charm_dir)
        self.agent_dir = os.path.dirname(self.charm_dir)
        self.venv = os.path.abspath(venv_dir or os.path.join(self.agent_dir, VENV_DIRNAME))
        state_dir = os.path.dirname(self.venv)
        self.log = os.path.join(state_dir, LOG_NAME)
        self.lock = os.path.join(state_dir, LOCK_NAME)
        self.stamp = os.path.join(self.venv, STAMP_NAME)
        self.fingerprint = os.path.join(self.venv, FINGERPRINT_NAME)
        self.python = os.path.join(self.venv, "bin", "python3")
        self.lib = os.path.join(self.charm_dir, "lib")
        self.wheelhouse = os.path.join(self.charm_dir, "wheelhouse")
        self.requirements = os.path.join(self.charm_dir, "wheelhouse.txt")


def _python_tag(version_info=None) -> str:
    v = version_info or sys.version_info
    return "{}-{}.{}".format(sys.implementation.name, v[0], v[1])


def wheelhouse_key(layout: Layout) -> str:
    """sha256 over the install format, the Python version and the wheelhouse."""
    import hashlib
    digest = hashlib.sha256()
    digest.update("format={}\npython={}\n".format(FORMAT, _python_tag()).encode())
    try:
        with open(layout.requirements, "rb") as f:
            digest.update(f.read())
    except FileNotFoundError:
        pass
    try:
        names = sorted(os.listdir(layout.wheelhouse))
    except FileNotFoundError:
        names = []
    for name in names:
        digest.update(b"\0" + name.encode() + b"\0")
        with open(os.path.join(layout.wheelhouse, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def wheelhouse_fingerprint(layout: Layout) -> str:
    """The install format, the Python version, and the name, size, inode and
    modification and change times of wheelhouse.txt and of every file in
    wheelhouse/: what stat() says of the wheelhouse, without reading it. (A
    copy can keep a file's mtime, `cp -a`, never its inode and ctime.)"""
    lines = ["format={} python={}".format(FORMAT, _python_tag())]
    try:
        names = sorted(os.listdir(layout.wheelhouse))
    except FileNotFoundError:
        names = []
    for path in [layout.requirements] + [os.path.join(layout.wheelhouse, n) for n in names]:
        try:
            st = os.stat(path)
            lines.append("{} {} {} {} {}".format(
                path, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns))
        except FileNotFoundError:
            lines.append("{} -".format(path))
    return "\n".join(lines) + "\n"


def _fingerprint_matches(layout: Layout, fingerprint: str) -> bool:
    try:
        with open(layout.fingerprint) as f:
            recorded = f.read()
    except OSError:
        return False
    return recorded == fingerprint and os.access(layout.python, os.X_OK)


def _record_fingerprint(layout: Layout, fingerprint: str) -> None:
    """Written once the venv holds the wheelhouse these files hash to (the
    venv's own file: recreating the venv removes it). Best effort: where it
    cannot be written (a full disk), hooks hash the wheelhouse as before."""
    tmp = "{}.{}.tmp".format(layout.fingerprint, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write(fingerprint)
        os.replace(tmp, layout.fingerprint)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def is_installed(layout: Layout, key: str) -> bool:
    """Whether the venv exists and was completed for exactly this key."""
    try:
        with open(layout.stamp) as f:
            stamp = f.read().strip()
    except OSError:
        return False
    return stamp == key and os.access(layout.python, os.X_OK)


def missing_modules(names=("ensurepip", "venv")) -> list[str]:
    """The modules of ``names`` this interpreter cannot import."""
    importlib.invalidate_caches()
    return [n for n in names if importlib.util.find_spec(n) is None]


def _clean_env(extra: dict | None = None) -> dict:
    """The environment for pip and apt: no inherited pip or Python settings.

    A PIP_FIND_LINKS, PIP_INDEX_URL, pip.conf or PYTHONPATH of the machine
    must not change what gets installed (or let it reach the network).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_")
        and k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV", REEXEC_ENV)
    }
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONNOUSERSITE="1",
    )
    env.update(extra or {})
    return env


def _tail(path: str, start: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-TAIL_LINES:])


def _run(cmd: list[str], log, env: dict | None = None, what: str | None = None) -> None:
    """Run ``cmd`` with its output appended to the log; raise on failure."""
    log.write("\n$ {}\n".format(" ".join(cmd)))
    log.flush()
    start = log.tell()
    try:
        rc = subprocess.call(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env if env is not None else _clean_env(),
        )
    except OSError as e:
        raise BootstrapError(
            "{} failed: cannot run {}: {}".format(what or cmd[0], cmd[0], e)) from e
    log.flush()
    if rc != 0:
        raise BootstrapError(
            "{} failed (exit code {}); full output in {}; last lines:\n{}".format(
                what or " ".join(cmd), rc, log.name, _tail(log.name, start)))


def _hook_tool(*args: str) -> None:
    """Best effort: tell Juju (status-set, juju-log) what is going on."""
    if shutil.which(args[0]):
        subprocess.call(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)


def apt_install(packages: list[str], log) -> None:
    """apt-get install ``packages``, running apt-get update once if needed."""
    if not shutil.which("apt-get"):
        raise BootstrapError(
            "python3 here cannot create a venv (missing: {}) and there is no apt-get "
            "to install {}".format(", ".join(packages), " ".join(packages)))
    env = _clean_env({"DEBIAN_FRONTEND": "noninteractive"})
    # A fresh machine's unattended-upgrades may hold the dpkg lock for a while.
    wait = ["-o", "DPkg::Lock::Timeout={}".format(APT_LOCK_TIMEOUT)]
    cmd = ["apt-get"] + wait + ["install", "-y", "--no-install-recommends"] + list(packages)
    what = "apt-get install {}".format(" ".join(packages))
    try:
        _run(cmd, log, env, what)
    except BootstrapError:
        _run(["apt-get"] + wait + ["update"], log, env, "apt-get update")
        _run(cmd, log, env, what)


def ensure_venv_support(log) -> list[str]:
    """Make sure this python3 can create a venv with pip; return apt packages installed.

    Nothing is installed unless ``ensurepip`` or ``venv`` is missing (Debian
    and Ubuntu ship ensurepip in python3-venv). Then, since apt runs anyway,
    the system pip, setuptools and wheel come along if they are missing too.
    """
    if not missing_modules(("ensurepip", "venv")):
        return []
    missing = missing_modules(tuple(APT_PACKAGES))
    packages = sorted({APT_PACKAGES[m] for m in missing})
    log.write("python3 lacks {}; installing {}\n".format(", ".join(missing), " ".join(packages)))
    apt_install(packages, log)
    still = missing_modules(("ensurepip", "venv"))
    if still:
        raise BootstrapError(
            "python3 still cannot create a venv after installing {} (missing: {})".format(
                " ".join(packages), ", ".join(still)))
    return packages


def _wheelhouse_has(layout: Layout, project: str) -> bool:
    """Whether the wheelhouse has a distribution of ``project`` (any version)."""
    want = project.lower().replace("-", "_").replace(".", "_")
    for name in os.listdir(layout.wheelhouse):
        dist = name.split("-", 1)[0].lower().replace("-", "_").replace(".", "_")
        if dist == want:
            return True
    return False


#: Wheel tags any Python 3 on any architecture can install.
PURE_TAGS = ("-py3-none-any.whl", "-py2.py3-none-any.whl")


def pure_wheels(layout: Layout) -> list[str] | None:
    """The wheelhouse's wheels if it holds nothing but pure-Python wheels, else None."""
    names = sorted(os.listdir(layout.wheelhouse))
    if names and all(name.endswith(PURE_TAGS) for name in names):
        return [os.path.join(layout.wheelhouse, name) for name in names]
    return None


def site_packages(venv_dir: str, version_info=None) -> str:
    v = version_info or sys.version_info
    return os.path.join(venv_dir, "lib", "python{}.{}".format(v[0], v[1]), "site-packages")


def unpack_wheel(wheel: str, venv_dir: str, made_dirs: set | None = None) -> int:
    """Install one pure wheel into ``venv_dir`` by unpacking it; return its file count.

    A pure wheel's root goes to site-packages; its ``NAME.data/`` dirs go
    where the wheel spec says (purelib/platlib: site-packages, scripts: bin,
    data: the prefix). Console-script entry points are not generated: no hook
    runs them. ``made_dirs`` remembers the directories made so far (a
    makedirs per file is most of the cost).
    """
    made_dirs = set() if made_dirs is None else made_dirs
    site = site_packages(venv_dir)
    targets = {"purelib": site, "platlib": site,
               "scripts": os.path.join(venv_dir, "bin"), "data": venv_dir}
    root = os.path.normpath(venv_dir) + os.sep
    count = 0
    import zipfile
    with zipfile.ZipFile(wheel) as z:
        for member in z.infolist():
            if member.is_dir():
                continue
            top, _, rest = member.filename.partition("/")
            base = site
            name = member.filename
            if top.endswith(".data") and rest:
                kind, _, name = rest.partition("/")
                if kind not in targets:
                    raise BootstrapError("{}: unsupported {} in {}".format(
                        os.path.basename(wheel), kind, top))
                base = targets[kind]
            path = os.path.normpath(os.path.join(base, name))
            if not path.startswith(root):
                raise BootstrapError("{}: {} would land outside the venv".format(
                    os.path.basename(wheel), member.filename))
            parent = os.path.dirname(path)
            if parent not in made_dirs:
                os.makedirs(parent, exist_ok=True)
                made_dirs.add(parent)
            with open(path, "wb") as dst:
                dst.write(z.read(member))
            if (member.external_attr >> 16) & 0o111 or base == targets["scripts"]:
                os.chmod(path, 0o755)
            count += 1
    return count


def install_wheels(layout: Layout, wheels: list[str], log) -> None:
    """A venv without pip, the wheels unpacked into it."""
    import venv as _venv
    import zipfile
    _venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(layout.venv)
    if not os.access(layout.python, os.X_OK):
        raise BootstrapError("creating the venv left no {}".format(layout.python))
    made_dirs: set = set()
    for wheel in wheels:
        try:
            count = unpack_wheel(wheel, layout.venv, made_dirs)
        except (OSError, zipfile.BadZipFile) as e:
            raise BootstrapError("unpacking {} failed: {}".format(
                os.path.basename(wheel), e)) from e
        log.write("unpacked {} ({} files)\n".format(os.path.basename(wheel), count))


def install(layout: Layout, key: str, log) -> None:
    """(Re)create the venv and install the wheelhouse into it, offline."""
    if not os.path.isdir(layout.wheelhouse) or not os.path.isfile(layout.requirements):
        raise BootstrapError(
            "{} has no wheelhouse/ or wheelhouse.txt: build the charm with "
            "scripts/build-charm (charm-build)".format(layout.charm_dir))
    shutil.rmtree(layout.venv, ignore_errors=True)
    wheels = pure_wheels(layout)
    if wheels is not None:
        install_wheels(layout, wheels, log)
    else:
        install_sources(layout, log)
    _run([layout.python, "-c",
          "import importlib.util, sys; "
          "sys.exit(0 if importlib.util.find_spec('charms.reactive') else 1)"],
         log, what="checking for charms.reactive in the venv")
    tmp = layout.stamp + ".tmp"
    with open(tmp, "w") as f:
        f.write(key + "\n")
    os.replace(tmp, layout.stamp)


def install_sources(layout: Layout, log) -> None:
    """pip installs the wheelhouse (sdists among it) into a new venv, offline."""
    ensure_venv_support(log)
    _run([sys.executable, "-m", "venv", layout.venv], log, what="creating the venv")
    if not os.access(layout.python, os.X_OK):
        raise BootstrapError("creating the venv left no {}".format(layout.python))
    pip = [layout.python, "-m", "pip", "install", "--no-index", "--find-links",
           layout.wheelhouse, "--progress-bar", "off"]
    # A private pip cache for this install only: the build backends' isolated
    # builds then reuse the setuptools wheel built once, and nothing is left
    # in root's ~/.cache.
    import tempfile
    cache = tempfile.mkdtemp(prefix=".flannel-pip-cache.", dir=os.path.dirname(layout.venv))
    env = _clean_env({"PIP_CACHE_DIR": cache})
    try:
        backends = [b for b in BUILD_BACKENDS if _wheelhouse_has(layout, b)]
        if backends:
            # --upgrade: the venv may already hold an older setuptools from
            # ensurepip (65.5 on 3.11, 59.6 on jammy) that pip would keep.
            _run(pip + ["--upgrade"] + backends, log, env,
                 "installing the build backends ({})".format(" ".join(backends)))
        _run(pip + ["--no-build-isolation", "-r", layout.requirements], log, env,
             "installing the wheelhouse")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: str):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(charm_dir: str, venv_dir: str | None = None) -> str:
    """Make sure the venv holds this charm's wheelhouse; return its python.

    Fast when it already does: one listdir and a stat per wheelhouse file,
    compared with what the venv recorded; the wheelhouse is hashed only when
    they differ (an upgrade-charm, a new Python). Raises
    :class:`BootstrapError` with the reason (and the tail of the install log)
    when the install fails. Sets ``$FLANNEL_BOOTSTRAP_INSTALLED`` when it
    installed (and set the unit's status).
    """
    layout = Layout(charm_dir, venv_dir)
    fingerprint = wheelhouse_fingerprint(layout)
    if _fingerprint_matches(layout, fingerprint):
        return layout.python
    key = wheelhouse_key(layout)
    if is_installed(layout, key):
        # the same wheelhouse in files written anew (upgrade-charm): stat()
        # answers from the next hook on
        _record_fingerprint(layout, fingerprint)
        return layout.python
    os.makedirs(os.path.dirname(layout.venv), exist_ok=True)
    with _locked(layout.lock):
        if is_installed(layout, key):  # another process finished it meanwhile
            return layout.python
        os.environ[INSTALLED_ENV] = "1"
        _hook_tool("status-set", "maintenance", "Installing the charm's Python dependencies")
        started = time.monotonic()
        with open(layout.log, "a") as log:
            log.write("\n==== {} installing wheelhouse {} into {} with {} ({})\n".format(
                time.strftime("%Y-%m-%dT%H:%M:%S%z"), key[:16], layout.venv,
                sys.executable, _python_tag()))
            try:
                install(layout, key, log)
            except BootstrapError as e:
                log.write("FAILED: {}\n".format(str(e).splitlines()[0]))
                raise
            elapsed = time.monotonic() - started
            log.write("==== done in {:.2f}s\n".format(elapsed))
        _record_fingerprint(layout, fingerprint)
        _hook_tool("juju-log", "-l", "INFO",
                   "flannel bootstrap: installed the wheelhouse into {} in {:.1f}s".format(
                       layout.venv, elapsed))
    return layout.python


def _hand_back_to_the_machines_python(layout: Layout, hook_path: str, argv: list[str]) -> None:
    """Run the hook again with the machine's python3 (PATH without the venv's
    bin), which installs the wheelhouse and comes back; does not return."""
    venv_bin = os.path.realpath(os.path.join(layout.venv, "bin"))
    path = os.pathsep.join(d for d in os.environ.get("PATH", os.defpath).split(os.pathsep)
                           if d and os.path.realpath(d) != venv_bin)
    python = shutil.which("python3", path=path)
    if python is None:
        raise BootstrapError("no python3 on PATH ({}) to install the wheelhouse with".format(path))
    env = dict(os.environ, PATH=path)
    env.pop("VIRTUAL_ENV", None)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, [python, os.path.abspath(hook_path)] + argv[1:], env)


def _in_venv(venv: str) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(venv)


class EntryPointsOnly(types.ModuleType):
    """`pkg_resources` as far as charms.reactive uses it, for every hook:
    ``iter_entry_points`` (how it finds its relation factories), answered by
    importlib.metadata. Importing the real pkg_resources scans and parses
    every installed distribution: ~110 ms, a third of a hook's CPU. Any other
    attribute imports the real module and is taken from it."""

    def __init__(self):
        super().__init__("pkg_resources")

    @staticmethod
    def iter_entry_points(group: str, name: str | None = None):
        import importlib.metadata
        for entry_point in importlib.metadata.entry_points(group=group):
            if name is None or entry_point.name == name:
                yield entry_point

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._real(), attr)

    def _real(self):
        """The real pkg_resources, imported once (it replaces this module in
        sys.modules); AttributeError where there is none (setuptools 82+)."""
        real = vars(self).get("_real_module")
        if real is None:
            real = sys.modules.get("pkg_resources")
            if real is None or real is self:
                sys.modules.pop("pkg_resources", None)
                try:
                    import pkg_resources as real
                except ImportError as error:
                    sys.modules["pkg_resources"] = self
                    raise AttributeError(f"no pkg_resources to ask: {error}") from error
            vars(self)["_real_module"] = real
        return real


def distutils_from_setuptools() -> None:
    """Python 3.12+ has no distutils, which charmhelpers imports (for
    LooseVersion); setuptools' shim (its distutils-precedence.pth) answers
    with setuptools' copy, setuptools/_distutils, but imports all of
    setuptools first: ~100 ms of every hook on Ubuntu 24.04. Load that same
    copy as ``distutils`` by itself. Nothing is done where distutils is
    already imported or setuptools is missing: the import then goes as it
    would have."""
    if "distutils" in sys.modules:
        return
    setuptools = importlib.util.find_spec("setuptools")
    if setuptools is None or not setuptools.submodule_search_locations:
        return
    root = list(setuptools.submodule_search_locations)[0]
    package = os.path.join(root, "_distutils")
    # what importing setuptools would add: the packages it vendors, which
    # some of distutils' modules import (distutils.util: jaraco)
    vendor = os.path.join(root, "_vendor")
    if os.path.isdir(vendor) and vendor not in sys.path:
        sys.path.append(vendor)
    spec = importlib.util.spec_from_file_location(
        "distutils", os.path.join(package, "__init__.py"), submodule_search_locations=[package])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["distutils"] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules["distutils"]


def run_hook(charm_dir: str, hook_path: str, argv: list[str] | None = None) -> None:
    """The body of every hook: bootstrap, then charms.reactive.main().

    In the machine's python3 this ensures the venv and re-executes the hook
    with the venv's python (so sys.argv[0], from which charms.reactive takes
    the hook name, stays the hook's path); it does not return. In the venv's
    python (where the hook's sh part sends it once the venv exists) it checks
    that the venv still holds this wheelhouse (a stat per file; else back to
    the machine's python3, which installs it), puts ``lib/`` on sys.path and
    runs charms.reactive.
    """
    _run_in_venv(charm_dir, hook_path, argv, "charms.reactive")


def run_action(charm_dir: str, action_path: str, argv: list[str] | None = None) -> None:
    """The body of every action (actions/<name>): as run_hook, then
    charms.flannel.actions.main(), which takes the action from argv[0]."""
    _run_in_venv(charm_dir, action_path, argv, "charms.flannel.actions")


def _run_in_venv(charm_dir: str, hook_path: str, argv: list[str] | None, module: str) -> None:
    layout = Layout(charm_dir)
    argv = list(sys.argv if argv is None else argv)
    if _in_venv(layout.venv):
        if not os.environ.pop(REEXEC_ENV, None) and \
                not _fingerprint_matches(layout, wheelhouse_fingerprint(layout)):
            # the hook's sh part found the venv, but the wheelhouse changed
            # since it was made (upgrade-charm): the machine's python3 installs
            _hand_back_to_the_machines_python(layout, hook_path, argv)
        if layout.lib not in sys.path:
            sys.path.append(layout.lib)
        # charms.reactive imports pkg_resources, which warns on every import
        # since setuptools 80.9: keep that out of every hook's output.
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated",
                                category=UserWarning)
        # setuptools, if anything imports it after distutils_from_setuptools(),
        # takes distutils over again, saying so
        for message in ("Setuptools is replacing distutils", "Distutils was imported before"):
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        sys.modules.setdefault("pkg_resources", EntryPointsOnly())
        if sys.version_info >= (3, 12):
            distutils_from_setuptools()
        profile = os.environ.get(PROFILE_ENV)
        if profile:   # sandbox/bench.py: what each hook costs (charms/flannel/hook_profile.py)
            from charms.flannel.hook_profile import profiled
            profiled(lambda: importlib.import_module(module).main(), profile)
            return
        importlib.import_module(module).main()
        return
    if os.environ.get(REEXEC_ENV):
        raise BootstrapError(
            "re-executed with {} but not running in the venv {}".format(
                os.environ[REEXEC_ENV], layout.venv))
    python = ensure(charm_dir)
    env = dict(os.environ)  # with INSTALLED_ENV, if ensure() installed
    env[REEXEC_ENV] = layout.venv
    env["VIRTUAL_ENV"] = layout.venv
    env["PATH"] = os.path.join(layout.venv, "bin") + os.pathsep + env.get("PATH", os.defpath)
    if sys.version_info < (3, 12):
        # charmhelpers imports distutils: where the standard library still has
        # it, take that one, not setuptools' (its shim, which the venv's
        # distutils-precedence.pth installs, costs every hook ~50 ms of imports)
        env.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, [python, os.path.abspath(hook_path)] + argv[1:], env)
