"""Options, preflight and fixtures of the real-Juju integration tests.

Everything here runs only where a Juju controller answers. The preflight
(`juju_controller`, session scope) checks, in order:

1. the `juju` CLI is on PATH;
2. a controller is configured (``--controller``, ``$JUJU_CONTROLLER`` or
   the current controller in ``$JUJU_DATA/controllers.yaml``);
3. python-libjuju connects to it within ``--controller-timeout`` seconds.

The first check that fails skips every test of the module at setup time
with its reason, and the reason is repeated in the terminal summary, so a
machine without Juju reports "skipped", never "passed". Collection needs
none of it: ``pytest --collect-only tests/integration`` works anywhere.

Options are read with a fallback to environment variables, because when
pytest is started on a parent directory (``pytest tests``) this conftest
is loaded after the command line was parsed: then only the defaults and
the environment apply.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:  # both come from requirements-dev.txt; guard so collection never dies
    import pytest_asyncio
    from pytest_operator.plugin import OpsTest
except ImportError as exc:  # pragma: no cover - depends on the venv
    pytest_asyncio = None
    OpsTest = None
    _IMPORT_PROBLEM = f"{exc.name or exc} is not installed"
else:
    _IMPORT_PROBLEM = None

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
# The test module imports its sibling flannel_cluster.py; make that work
# under --import-mode=importlib too, which puts no test dir on sys.path.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# (option, environment variable, default, help)
_OPTIONS = (
    ("--charm", "FLANNEL_CHARM", None,
     "packed flannel charm to deploy; default: build it with "
     "scripts/build-charm (build/flannel.charm)"),
    ("--flannel-resource", "FLANNEL_RESOURCE", None,
     "flannel resource tarball for --flannel-arch; default: build it with "
     "`scripts/build-resource --arch ARCH --out DIR`"),
    ("--flannel-arch", "FLANNEL_TEST_ARCH", "amd64",
     "architecture of the test machines and of the attached resource"),
    ("--k8s-channel", "FLANNEL_K8S_CHANNEL", "1.32/stable",
     "channel of the Charmed Kubernetes charms, also used as the "
     "Kubernetes snap channel"),
    ("--base", "FLANNEL_TEST_BASE", "ubuntu@22.04",
     "base (OS) of the test machines"),
    ("--machine-constraints", "FLANNEL_TEST_CONSTRAINTS",
     "cores=2 mem=8G root-disk=20G",
     "constraints of each of the two machines (add "
     "virt-type=virtual-machine on LXD clouds)"),
    ("--test-image", "FLANNEL_TEST_IMAGE", "busybox:1.36",
     "image of the test pods"),
    ("--alt-cidr", "FLANNEL_TEST_ALT_CIDR", "10.3.0.0/16",
     "cidr the cidr-change test switches to"),
    ("--controller-timeout", "FLANNEL_CONTROLLER_TIMEOUT", "60",
     "seconds the preflight waits for the controller to answer"),
    ("--build-timeout", "FLANNEL_BUILD_TIMEOUT", "2400",
     "seconds allowed for building the charm or the resource"),
    ("--deploy-timeout", "FLANNEL_DEPLOY_TIMEOUT", "3600",
     "seconds allowed for the cluster to settle after the deploy"),
    ("--step-timeout", "FLANNEL_STEP_TIMEOUT", "1200",
     "seconds allowed for each later step (relation cycle, config "
     "change) to settle"),
    ("--pod-timeout", "FLANNEL_POD_TIMEOUT", "420",
     "seconds allowed for a test pod to reach Running"),
)

_PREFLIGHT = pytest.StashKey()


def pytest_addoption(parser):
    group = parser.getgroup(
        "flannel-integration", "flannel charm integration tests")
    for name, env, default, help_text in _OPTIONS:
        group.addoption(
            name, action="store", default=None,
            help=f"{help_text} (env {env}; default {default})")


def option(config, name: str) -> str | None:
    """The option's value: command line, else environment, else default."""
    for opt, env, default, _ in _OPTIONS:
        if opt == name:
            value = config.getoption(name, default=None)
            if value in (None, ""):
                value = os.environ.get(env) or default
            return value
    raise KeyError(name)


def seconds(config, name: str) -> float:
    value = option(config, name)
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{name} wants seconds, not {value!r}")
    if result <= 0:
        raise pytest.UsageError(f"{name} must be positive, not {value!r}")
    return result


# --------------------------------------------------------------- preflight

@dataclass(frozen=True)
class Preflight:
    controller: str | None
    skip_reason: str | None


def _configured_controller(requested: str | None):
    """(name, "", api endpoints) or (None, why there is none, [])."""
    from juju.client.jujudata import FileJujuData

    data = FileJujuData()
    try:
        known = data.controllers() or {}
        current = data.current_controller()
    except FileNotFoundError:
        return None, (
            f"no Juju controller configured: {data.path}/controllers.yaml "
            "does not exist (bootstrap one with `juju bootstrap`)"), []
    except Exception as exc:  # a broken file is no controller either
        return None, (
            f"no Juju controller configured: cannot read "
            f"{data.path}/controllers.yaml: {type(exc).__name__}: {exc}"), []
    name = requested or os.environ.get("JUJU_CONTROLLER") or current
    if not name:
        return None, (
            f"no Juju controller configured: {data.path}/controllers.yaml "
            "names no current controller (`juju switch NAME` or "
            "--controller NAME)"), []
    if name not in known:
        return None, (
            f"no Juju controller configured: {name!r} is not in "
            f"{data.path}/controllers.yaml (known: "
            f"{', '.join(sorted(known)) or 'none'})"), []
    return name, "", list(known[name].get("api-endpoints") or [])


async def _connect(name: str) -> None:
    from juju.controller import Controller

    controller = Controller()
    try:
        await controller.connect(name)
        await controller.get_cloud()  # one real round trip
    finally:
        await controller.disconnect()


def _run_private(coro, timeout: float):
    """Run coro on a loop of its own, within timeout, and clean up after.

    asyncio.run() would reset the thread's event loop, which the module
    loop of pytest-asyncio relies on; and a cancelled connection attempt
    still needs its loop to close its transport.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=5))
        loop.run_until_complete(asyncio.sleep(0))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def probe_controller(requested: str | None, timeout: float) -> Preflight:
    """Decide whether the integration tests can run here, and why not."""
    if _IMPORT_PROBLEM:
        return Preflight(None, f"integration test deps missing: "
                               f"{_IMPORT_PROBLEM} (pip install -r "
                               "requirements-dev.txt)")
    if shutil.which("juju") is None:
        return Preflight(None, "no Juju controller reachable: the juju CLI "
                               "is not on PATH (snap install juju)")
    name, why, endpoints = _configured_controller(requested)
    if name is None:
        return Preflight(None, why)
    try:
        _run_private(_connect(name), timeout)
    except asyncio.TimeoutError:
        return Preflight(None, f"Juju controller {name!r} not reachable: no "
                               f"answer within {timeout:g}s from "
                               f"{', '.join(endpoints) or 'no endpoint'}")
    except Exception as exc:
        detail = str(exc).strip().splitlines()
        return Preflight(None, f"Juju controller {name!r} not reachable: "
                               f"{type(exc).__name__}: "
                               f"{detail[0] if detail else ''}")
    return Preflight(name, None)


@pytest.fixture(scope="session")
def juju_controller(request) -> str:
    """The name of a reachable controller, or skip the requesting tests."""
    config = request.config
    result = config.stash.get(_PREFLIGHT, None)
    if result is None:
        result = probe_controller(
            config.getoption("--controller", default=None),
            seconds(config, "--controller-timeout"))
        config.stash[_PREFLIGHT] = result
    if result.skip_reason:
        pytest.skip(result.skip_reason)
    return result.controller


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    result = config.stash.get(_PREFLIGHT, None)
    if result is not None and result.skip_reason:
        terminalreporter.write_sep("-", "flannel integration tests")
        terminalreporter.write_line(
            f"SKIPPED, no controller to test against: {result.skip_reason}")


# ----------------------------------------------------------------- ops_test

if pytest_asyncio is not None:
    @pytest_asyncio.fixture(scope="module")
    async def ops_test(request, tmp_path_factory, juju_controller):
        """pytest-operator's OpsTest, behind the preflight.

        Same life cycle as the plugin's own fixture (a fresh model per
        module unless --model is given, destroyed afterwards unless
        --keep-models), but it needs no charmcraft on PATH (the charm is
        built by scripts/build-charm) and it uses the controller the
        preflight reached.
        """
        ops = OpsTest(request, tmp_path_factory)
        if not ops.controller_name:
            ops.controller_name = juju_controller
        await ops._setup_model()
        OpsTest._instance = ops
        try:
            yield ops
        finally:
            OpsTest._instance = None
            await ops._cleanup_models()
else:
    @pytest.fixture(scope="module")
    def ops_test(juju_controller):  # pragma: no cover
        pytest.skip(_IMPORT_PROBLEM)  # juju_controller has skipped already


# ---------------------------------------------------------- build products

def _run_build(argv: list[str], timeout: float, what: str) -> str:
    try:
        proc = subprocess.run(
            argv, cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not finish within {timeout:g}s", False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-30:])
        pytest.fail(f"{what} failed ({proc.returncode}):\n{tail}", False)
    return proc.stdout


@pytest.fixture(scope="module")
def flannel_charm(request, juju_controller) -> Path:
    """The packed charm: --charm / $FLANNEL_CHARM, else scripts/build-charm."""
    given = option(request.config, "--charm")
    if given:
        path = Path(given).expanduser().resolve()
        if not path.exists():
            pytest.fail(f"--charm {path} does not exist", False)
        return path
    script = REPO_ROOT / "scripts" / "build-charm"
    if not script.exists():
        pytest.fail("no --charm given and scripts/build-charm is missing",
                    False)
    _run_build(["bash", str(script)],
               seconds(request.config, "--build-timeout"),
               "scripts/build-charm")
    built = REPO_ROOT / "build" / "flannel.charm"
    if not built.is_file():
        pytest.fail(f"scripts/build-charm succeeded but {built} is missing",
                    False)
    return built


@dataclass(frozen=True)
class FlannelResource:
    name: str  # e.g. flannel-amd64
    path: Path


@pytest.fixture(scope="module")
def flannel_resource(request, juju_controller, tmp_path_factory):
    """The resource for --flannel-arch, given or built by scripts/build-resource."""
    arch = option(request.config, "--flannel-arch")
    given = option(request.config, "--flannel-resource")
    if given:
        path = Path(given).expanduser().resolve()
        if not path.is_file():
            pytest.fail(f"--flannel-resource {path} is not a file", False)
        return FlannelResource(f"flannel-{arch}", path)
    out = tmp_path_factory.mktemp("flannel-resource")
    stdout = _run_build(
        [str(REPO_ROOT / "scripts" / "build-resource"), "--arch", arch, "--out", str(out)],
        seconds(request.config, "--build-timeout"),
        "scripts/build-resource")
    for line in reversed(stdout.splitlines()):
        candidate = Path(line.strip())
        if line.strip() and candidate.is_file():
            return FlannelResource(f"flannel-{arch}", candidate.resolve())
    pytest.fail("scripts/build-resource printed no tarball path:\n"
                + stdout[-2000:], False)


@dataclass(frozen=True)
class Settings:
    """Everything the tests read from the options, checked once."""
    arch: str
    k8s_channel: str
    base: str
    constraints: str
    image: str
    alt_cidr: str
    deploy_timeout: float
    step_timeout: float
    pod_timeout: float


@pytest.fixture(scope="module")
def settings(request, juju_controller) -> Settings:
    config = request.config
    return Settings(
        arch=option(config, "--flannel-arch"),
        k8s_channel=option(config, "--k8s-channel"),
        base=option(config, "--base"),
        constraints=option(config, "--machine-constraints"),
        image=option(config, "--test-image"),
        alt_cidr=option(config, "--alt-cidr"),
        deploy_timeout=seconds(config, "--deploy-timeout"),
        step_timeout=seconds(config, "--step-timeout"),
        pod_timeout=seconds(config, "--pod-timeout"),
    )
