"""Checks of the flannel-<arch> resource tarball and extraction of its members.

Every problem becomes a ResourceProblem whose message is the unit's blocked
status: it names the resource and says what is wrong with it.
"""

from __future__ import annotations

import os
import platform
import tarfile
import zlib

MEMBERS = ("flanneld", "cni-plugin/flannel")
GZIP_MAGIC = b"\x1f\x8b"

# platform.machine() -> the architecture suffix of the resource names.
ARCHITECTURES = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "s390x": "s390x",
}


class ResourceProblem(Exception):
    """The resource cannot be used; message is meant for a blocked status."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def resource_name(machine: str | None = None) -> str:
    """The resource for this machine's architecture, e.g. "flannel-amd64"."""
    machine = platform.machine() if machine is None else machine
    arch = ARCHITECTURES.get(machine.lower())
    if arch is None:
        supported = ", ".join(sorted(set(ARCHITECTURES.values())))
        raise ResourceProblem(
            f"Unsupported architecture {machine or 'unknown'}: "
            f"flannel resources exist for {supported}"
        )
    return f"flannel-{arch}"


def read_resource(path: str | os.PathLike[str] | None, name: str) -> dict[str, bytes]:
    """Read the members flannel needs out of the resource tarball at path.

    path is what `resource-get` gave (None or empty when nothing is attached).
    Returns {"flanneld": bytes, "cni-plugin/flannel": bytes}.
    """
    if not path or not os.path.exists(path):
        raise ResourceProblem(f"Missing resource {name}: attach it with juju attach-resource")
    if not os.path.isfile(path):
        raise ResourceProblem(f"Resource {name} is not a file: attach a .tar.gz with flannel")
    size = os.path.getsize(path)
    if size == 0:
        raise ResourceProblem(
            f"Resource {name} is empty (0 bytes): attach the flannel tarball "
            "with juju attach-resource"
        )
    with open(path, "rb") as handle:
        if handle.read(2) != GZIP_MAGIC:
            raise ResourceProblem(f"Resource {name} is not a gzip-compressed tar archive")
    try:
        return _extract(path, name)
    except EOFError:
        raise ResourceProblem(f"Resource {name} is truncated: attach it again") from None
    except tarfile.ReadError as error:
        # A complete gzip stream whose payload is not a tar says "invalid
        # header" or "empty file"; a cut-off one says "unexpected end of data".
        if "unexpected end" in str(error):
            raise ResourceProblem(f"Resource {name} is truncated: attach it again") from None
        raise ResourceProblem(f"Resource {name} is not a gzip-compressed tar archive") from None
    except (zlib.error, OSError, tarfile.TarError) as error:
        # e.g. a CRC mismatch: the bytes were damaged, not cut short.
        raise ResourceProblem(f"Resource {name} is corrupt ({error}): attach it again") from None


def install_members(record, members: dict[str, bytes], targets) -> str | None:
    """Put flanneld and the CNI plugin where they run (0755; `targets`:
    (path, member) pairs), through the install record; None, or the blocked
    message of a full disk (the operator's to fix: any later hook installs
    once there is room). Other write errors raise."""
    from .install_record import out_of_space
    for path, member in targets:
        try:
            record.install(path, members[member], 0o755)
        except OSError as error:
            full = out_of_space(error, path, len(members[member]))
            if full is None:
                raise
            return full
    return None


def _member_name(raw: str) -> str:
    # Tarballs made with `tar -C dir .` name members "./flanneld".
    while raw.startswith("./"):
        raw = raw[2:]
    return raw


def _extract(path: str | os.PathLike[str], name: str) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    with tarfile.open(path, mode="r:gz") as archive:
        # Walk every member, reading the whole stream: a truncated tail
        # (the gzip trailer) only shows when the end is reached.
        for member in archive:
            member_name = _member_name(member.name)
            if member_name not in MEMBERS:
                continue
            if not member.isfile():
                raise ResourceProblem(
                    f"Resource {name}: {member_name} is {_kind(member)}, not a regular file"
                )
            handle = archive.extractfile(member)
            assert handle is not None
            data = handle.read()
            if len(data) != member.size:
                raise EOFError("unexpected end of data")
            found[member_name] = data
        # Read to the end of the gzip stream so its CRC and length are checked.
        assert archive.fileobj is not None
        while archive.fileobj.read(1 << 20):
            pass
    missing = [member for member in MEMBERS if member not in found]
    if missing:
        raise ResourceProblem(f"Resource {name} lacks {' and '.join(missing)}")
    empty = [member for member in MEMBERS if not found[member]]
    if empty:
        raise ResourceProblem(f"Resource {name}: {' and '.join(empty)} is empty (0 bytes)")
    return found


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "a directory"
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    return "a special file"
