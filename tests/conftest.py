"""The whole suite's conventions.

- The charm's lib/ (charms.flannel) and the repo root (sandbox) are importable.
- Tiers run cheapest first, whatever order pytest collected them in (and
  in the functional tier, the longest modules first): unit,
  handlers (the reactive module in-process), packaging, sandbox_juju (the
  emulated Juju), sandbox (its real parts), functional, integration. After
  a tier with a failure no later tier runs (FLANNEL_TEST_KEEP_GOING=1 runs
  them anyway): a broken unit test is reported in seconds, not after the
  functional tier.
- Every test has a time limit (pytest-timeout, by tier, unless the test sets
  its own with @pytest.mark.timeout): a hang becomes a failure with the
  stack where it hung.
- The repetition profile (sandbox.profile: everyday or full) is printed in
  the header.
- `built_charm`: the charm as scripts/build-charm makes it, once per session
  ($FLANNEL_BUILT_CHARM if set), for the packaging and functional tiers.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "lib"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from sandbox import profile  # noqa: E402

TIERS = ("unit", "handlers", "packaging", "sandbox_juju", "sandbox", "functional",
         "integration")
# seconds per test, fixtures included (a cold cache builds the charm or the
# Go binaries inside the first test that needs them)
TIME_LIMITS = {"unit": 120, "handlers": 120, "packaging": 900, "sandbox_juju": 300, "sandbox": 900,
               "functional": 1500, "integration": 3600}
KEEP_GOING_ENV = "FLANNEL_TEST_KEEP_GOING"
# The functional modules that take longest on one worker (a module that
# shares a cluster is one xdist group, run whole by one worker), handed out
# first: pytest-xdist gives out work in collection order (scripts/test
# passes --no-loadscope-reorder, or it would sort groups by their number of
# tests), and the longest given last set the tier's end while the other
# workers idled (longest first, by the session summary's timings of the
# everyday profile).
LONGEST_FIRST = ("test_back_after_a_day_away.py", "test_kubernetes_sees_the_overlay.py",
                 "test_two_machines_everyday_operations.py", "test_refresh_from_the_old_charm.py",
                 "test_the_charmcraft_packed_charm.py", "test_dual_stack.py",
                 "test_removal_leaves_a_clean_node.py")


def tier_of(item) -> str:
    try:
        top = Path(str(item.fspath)).resolve().relative_to(ROOT / "tests").parts[0]
    except ValueError:
        return TIERS[-1]
    return top if top in TIERS else TIERS[-1]


def pytest_report_header(config):
    other = profile.FULL if profile.current() == profile.EVERYDAY else profile.EVERYDAY
    return (f"test profile: {profile.current()} (${profile.ENV}={other} for the other; "
            f"scripts/test --full)")


def _order(item) -> tuple[int, int]:
    name = Path(str(item.fspath)).name
    first = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    return TIERS.index(tier_of(item)), first


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=_order)  # stable: file order kept otherwise
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIME_LIMITS[tier_of(item)]))


_failed_tiers: set[str] = set()


def pytest_runtest_logreport(report):
    if report.failed:
        _failed_tiers.add(_tier_by_nodeid.get(report.nodeid, ""))


_tier_by_nodeid: dict[str, str] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    tier = _tier_by_nodeid[item.nodeid] = tier_of(item)
    yield
    # (only where a later tier follows in this run: the run's own end is no stop)
    last_of_tier = nextitem is not None and tier_of(nextitem) != tier
    if last_of_tier and tier in _failed_tiers and os.environ.get(KEEP_GOING_ENV) != "1":
        later = TIERS[TIERS.index(tier) + 1:]
        item.session.shouldstop = (f"the {tier} tier failed: later tiers ({', '.join(later)}) "
                                   f"not run (set {KEEP_GOING_ENV}=1 to run them anyway)")


@pytest.fixture(scope="session")
def built_charm(tmp_path_factory) -> Path:
    """The built charm dir: $FLANNEL_BUILT_CHARM, else scripts/build-charm
    into a temporary dir (a second or two with a cached wheelhouse)."""
    given = os.environ.get("FLANNEL_BUILT_CHARM")
    if given:
        path = Path(given)
        if not (path / "metadata.yaml").is_file():
            pytest.fail(f"FLANNEL_BUILT_CHARM={given} is not a built charm dir")
        return path
    cache = Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))
    if not ((cache / "charm-tools" / "bin" / "charm-build").exists()
            or subprocess.run(["sh", "-c", "command -v charm-build"],
                              capture_output=True).returncode == 0):
        pytest.skip("charm-tools is not installed (scripts/setup-host)")
    outdir = tmp_path_factory.mktemp("build")
    started = time.monotonic()
    run = subprocess.run([str(ROOT / "scripts" / "build-charm"), str(outdir)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        pytest.fail("scripts/build-charm failed:\n" + run.stdout[-4000:])
    print(f"built the charm in {time.monotonic() - started:.1f}s: {outdir / 'flannel'}",
          flush=True)
    return outdir / "flannel"
