"""The README's per-suite commands (tox -e ...) work on a fresh machine: tox
makes its own virtualenv, which seeds the newest setuptools, and setuptools
81+ has no pkg_resources, which charms.reactive imports.

A `unit` env (the same deps as `build`) that left setuptools to virtualenv
failed here with "ModuleNotFoundError: No module named 'pkg_resources'"
(setuptools 84.2.1 seeded by virtualenv 21).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

IMPORT_REACTIVE = """
import charmhelpers.osplatform as osplatform
osplatform.get_platform = lambda: "ubuntu"
import charms.reactive
"""


def test_a_fresh_tox_env_imports_charms_reactive(tmp_path):
    tox = Path(sys.executable).parent / "tox"
    if not tox.exists():
        pytest.skip("tox is not installed (requirements-dev.txt)")
    copy = tmp_path / "repo"
    for name in ("tox.ini", "requirements-dev.txt"):
        copy.mkdir(exist_ok=True)
        shutil.copy(REPO / name, copy / name)
    # Under `tox -e build` the outer tox's variables would steer this one
    # (tox 4 reads TOX_WORK_DIR and friends as options): a fresh shell's view.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TOX_") and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    made = subprocess.run([str(tox), "--workdir", str(copy / ".tox"), "-e", "unit", "--notest"],
                          cwd=copy, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if made.returncode != 0 and "Could not find a version" in made.stdout:
        pytest.skip("no package index reachable")
    assert made.returncode == 0, made.stdout[-3000:]
    env_python = copy / ".tox" / "unit" / "bin" / "python"
    # charmhelpers refuses to import off Ubuntu: answer its probe as conftest does.
    imported = subprocess.run([str(env_python), "-c", IMPORT_REACTIVE],
                              capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr[-2000:]
