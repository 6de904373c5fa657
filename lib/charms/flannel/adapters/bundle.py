"""The debug action's tarball: what commands on this machine say, and
writing it root-only."""
from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Sequence

from .machine import Machine

BUNDLE_MODE = 0o600


def command_output(machine: Machine, argv: Sequence[str]) -> str:
    """What a command printed (stdout, then stderr), headed by the command
    line; a command missing or failing is said in the text, never raised."""
    head = "$ " + " ".join(argv) + "\n"
    try:
        done = machine.run(argv, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return f"{head}(could not run: {error})\n"
    text = done.stdout + done.stderr
    if done.returncode:
        text += f"(exit status {done.returncode})\n"
    return head + text


def write_bundle(path: Path, entries: dict[str, str], top: str) -> None:
    """A gzipped tarball of `entries` (name -> text) below the directory
    `top`, readable by root only: it names addresses and logs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, BUNDLE_MODE)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, text in entries.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
