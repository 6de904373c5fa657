"""The record of every file and directory the charm put on the unit.

This is the fix for LP #1866869: on stop the charm removes exactly what it
installed, and nothing else.

- A path the charm wrote is recorded with the sha256 and mode it wrote (and,
  for a large file, its identity once written: see `_identity`).
- If something already stood at a path the first time the charm wrote it, a
  copy is kept under originals/ and put back, byte for byte, with its mode
  and owner, on remove_all().
- On remove_all(), a file whose content no longer matches the record was
  changed by someone else since (e.g. a principal re-extracting its CNI
  plugins); it is left alone and reported.
- If the charm writes such a path again (its next install), the file someone
  else put there is kept as the original first, and remove_all() puts it back.
- adopt() takes a file a previous charm of the application wrote as the
  charm's own, with no original (steps/adoption.py).
- A path only this charm writes (its unit file, conflist, etcd client files:
  install(..., sole=True)) never gets an original, whatever stood there or
  was edited in since: putting an edited unit file back on stop would leave
  a unit pointing at a flanneld that is gone. remove_all() removes it even
  if it changed (and reports it in changed_removed).
- Directories are removed only if the charm created them and they are empty.

- A record that cannot be read (truncated, not JSON, not the record's
  shape) raises DamagedRecord instead of being taken for an empty one: the
  charm then writes and deletes nothing through it (record_problem()).

Layout of the record directory (0700; originals may hold keys):
    record.json      {"files": {path: {...}}, "directories": [path, ...]}
    originals/<path> copies of pre-existing files, mirrored by absolute path
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

RECORD_FILE = "record.json"
# A file at least this large (flanneld: 54 MB) also has its identity recorded
# once written, so that the stop hook need not read it again to know it
IDENTIFIED_SIZE = 1 << 20
# How long, at most, recording that identity waits for the file system's
# clock to tick past the write (`_clock_past`)
TICK_WAIT = 0.05
ORIGINALS_DIR = "originals"
DEFAULT_DIR_MODE = 0o755


@dataclass
class RemovalReport:
    removed: list[Path] = field(default_factory=list)  # deleted: the charm's own files
    restored: list[Path] = field(default_factory=list)  # pre-charm original put back
    left_changed: list[Path] = field(default_factory=list)  # changed since; left alone
    changed_removed: list[Path] = field(default_factory=list)  # sole paths changed since
    gone: list[Path] = field(default_factory=list)  # already absent; nothing to do
    directories_removed: list[Path] = field(default_factory=list)


class DamagedRecord(ValueError):
    """The record file exists but cannot be read as a record."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Install record {path} {reason}")


def record_problem(directory: Path | str, expected: bool) -> str | None:
    """Why the record in `directory` cannot be trusted, or None: it is
    unreadable, or missing while `expected` (the charm has installed through
    it). A record that cannot be trusted proves nothing was written by the
    charm, so nothing may be written or deleted through it."""
    record_file = Path(directory) / RECORD_FILE
    try:
        InstallRecord(directory)
    except DamagedRecord as damaged:
        return str(damaged)
    if expected and not record_file.exists():
        return f"Install record {record_file} is missing"
    return None


def out_of_space(error: OSError, path: Path | str, size: int) -> str | None:
    """The blocked status for a file the disk had no room for, or None if
    `error` is anything else. install() left nothing behind: the temp file
    of the failed write is removed, and what stood at path is untouched."""
    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return f"Cannot install {path} ({size / 1e6:.1f} MB): {os.strerror(error.errno)}"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str | None:
    """Hash of a regular file's content; None for anything else."""
    if path.is_symlink() or not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _identity(path: Path) -> list[int] | None:
    """What changes with a write to a regular file, or its replacement:
    device, inode, size, and its mtime and ctime (ctime no one can set
    back: the kernel stamps it at every change of the inode). The stamps
    come from a clock that moves once a tick (1-10 ms; a second on some file
    systems): a write in the tick of the charm's own would keep them, so
    `_identify` waits for the next tick before it records them. None for
    anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _written_as(info: os.stat_result) -> list[int]:
    """The start of _identity() for a file as its writer left it."""
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]


def _clock_past(path: Path, stamp_ns: int) -> bool:
    """Whether path's file system stamps a later time than stamp_ns: its
    clock's tick has passed. Tried with path's own temp file (the one a
    write of path uses, which removal deletes), for at most TICK_WAIT
    seconds: a tick, not anything else, is waited for. False, too, if the
    temp file cannot be made (the identity is then not recorded)."""
    temp, deadline = _temp_path(path), time.monotonic() + TICK_WAIT
    try:
        while True:
            _drop_temp(path)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                if os.fstat(fd).st_mtime_ns > stamp_ns:
                    return True
            finally:
                os.close(fd)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            _drop_temp(path)


def _content_hash(path: Path, entry: dict[str, Any] | None) -> str | None:
    """_sha256_file(path), without reading a file whose identity is still
    the one the charm recorded as it wrote it (its content is then what the
    charm wrote)."""
    written = entry.get("written") if entry else None
    if written is not None and _identity(path) == written:
        return entry["sha256"]
    return _sha256_file(path)


def _temp_path(path: Path) -> Path:
    """The one temp file a write of path uses: a write killed midway (a
    SIGKILLed hook) leaves at most this file, which the next write of path
    replaces and remove_all() deletes."""
    return path.with_name(f".{path.name}.flannel.tmp")


def _drop_temp(path: Path) -> None:
    try:
        _temp_path(path).unlink()
    except FileNotFoundError:
        pass


def _write_atomically(path: Path, data: bytes, mode: int, owner=None) -> os.stat_result:
    """Write a temp file beside path, set its mode (and owner: [uid, gid]),
    fsync, rename over path: readers see the old file or the new one, never
    a partial one. The file's stat as written (the rename changes its
    ctime alone)."""
    temp = _temp_path(path)
    _drop_temp(path)  # what a killed write left
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if owner is not None:   # before the mode: chown clears set-id bits
                os.fchown(handle.fileno(), *owner)
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
            written = os.fstat(handle.fileno())
        os.replace(temp, path)
        return written
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


class InstallRecord:
    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._record_file = self.directory / RECORD_FILE
        self._originals = self.directory / ORIGINALS_DIR
        self._files: dict[str, dict[str, Any]] = {}
        self._directories: list[str] = []
        self._load()

    # -- public API ---------------------------------------------------------

    def install(self, path: Path | str, data: bytes, mode: int, *, sole: bool = False) -> bool:
        """Atomically put data at path with mode; True if the content changed.

        The first time the charm writes a path, whatever stood there is kept so
        remove_all() can restore it (not for a `sole` path: see the module
        doc). The record is saved before the file is written, so a crash in
        between leaves a file the record does not claim as the charm's
        (remove_all then leaves it), never an unrecorded one.
        """
        path = _absolute(path)
        self.ensure_directory(path.parent, DEFAULT_DIR_MODE)
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(f"{path} is a directory; refusing to replace it")
        key = str(path)
        entry = self._files.get(key)
        current = _content_hash(path, entry)
        wanted = sha256_bytes(data)
        if entry is None:
            entry = {"original": None if sole else self._keep_original(path)}
            self._files[key] = entry
        if sole:
            entry["sole"] = True
            entry["original"] = None
        elif current is not None and current not in (entry.get("sha256"), wanted,
                                                     entry.get("previous")):
            # Someone put their own file here since the charm wrote it (a
            # principal re-extracting its own `flannel`): that file is theirs,
            # so it becomes the original remove_all() puts back.
            entry["original"] = self._keep_original(path)
        if current == wanted and entry.get("sha256") == wanted:
            if stat.S_IMODE(path.stat().st_mode) != mode:
                written = entry.pop("written", None)   # (a chmod stamps a new ctime)
                os.chmod(path, mode)
                entry["mode"] = mode
                if written:   # (the file the charm wrote, still unless replaced meanwhile)
                    self._identify(entry, path, written[:4])
                else:
                    self._save()
            return False
        if entry.get("sha256") != wanted:
            # What the charm wrote before stays its own until the new write
            # lands: a hook killed in between finds it still on disk.
            entry["previous"] = entry.get("sha256")
        entry.update(sha256=wanted, mode=mode)
        entry.pop("written", None)
        self._save()
        written = _write_atomically(path, data, mode)
        if len(data) >= IDENTIFIED_SIZE:
            self._identify(entry, path, _written_as(written))
        return current != wanted

    def adopt(self, path: Path | str, mode: int | None = None) -> bool:
        """Take the regular file at path as the charm's own, as it stands
        (mode changed to `mode` if given): no original is kept, so
        remove_all() deletes it while it is unchanged. For files a previous
        charm of the same application wrote (steps/adoption.py).
        False if path is no regular file or is recorded already."""
        path = _absolute(path)
        current = _sha256_file(path)
        if current is None or self.is_recorded(path):
            return False
        if mode is not None:
            os.chmod(path, mode)
        self._files[str(path)] = {"original": None, "sha256": current,
                                  "mode": stat.S_IMODE(path.stat().st_mode), "adopted": True}
        self._save()
        return True

    def adopt_directory(self, path: Path | str, mode: int) -> bool:
        """Take an existing directory as one the charm created (set to mode):
        remove_all() removes it if empty. False if it is no directory."""
        path = _absolute(path)
        if path.is_symlink() or not path.is_dir():
            return False
        os.chmod(path, mode)
        if str(path) not in self._directories:
            self._directories.append(str(path))
            self._save()
        return True

    def ensure_directory(self, path: Path | str, mode: int) -> None:
        """Create path and any missing parents; record the ones created (so
        remove_all can remove them if empty). mode applies to created
        directories only: existing ones belong to someone else."""
        path = _absolute(path)
        missing = []
        probe = path
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        for directory in reversed(missing):  # shallowest first
            # Recorded before it is made: a hook killed in between leaves a
            # recorded directory that does not exist (remove_all skips it),
            # never a directory of the charm's that the record does not know.
            self._directories.append(str(directory))
            self._save()
            try:
                directory.mkdir()
            except FileExistsError:  # someone else made it meanwhile: theirs
                self._directories.remove(str(directory))
                self._save()
                continue
            os.chmod(directory, mode if directory == path else DEFAULT_DIR_MODE)

    def recorded_paths(self) -> list[Path]:
        return [Path(p) for p in self._files]

    def is_recorded(self, path: Path | str) -> bool:
        return str(_absolute(path)) in self._files

    def checksum(self, path: Path | str) -> str | None:
        """The sha256 the charm last wrote at path (None if never recorded):
        cheap, without re-reading a large binary in every hook."""
        entry = self._files.get(str(_absolute(path)))
        return entry.get("sha256") if entry else None

    def holds(self, path: Path | str) -> bool:
        """Whether path holds what the charm last wrote there (it reads the
        file, unless its identity is still the one recorded as the charm
        wrote it). False if gone, changed or never recorded."""
        where = _absolute(path)
        entry = self._files.get(str(where))
        try:
            return bool(entry and entry.get("sha256")) and \
                _content_hash(where, entry) == entry["sha256"]
        except OSError:
            return False

    def remove(self, path: Path | str) -> RemovalReport:
        """Undo one install (as remove_all() does it for each file) and
        forget the path: a file the charm writes only while an option asks
        for it."""
        report = RemovalReport()
        key = str(_absolute(path))
        entry = self._files.get(key)
        if entry is not None:
            self._undo_file(Path(key), entry, report)
            del self._files[key]
            self._save()
        return report

    def remove_directory(self, path: Path | str) -> bool:
        """Remove a directory the charm created, if it is empty, and forget
        it; True if it went. Someone else's, or one holding files, stays."""
        key = str(_absolute(path))
        if key not in self._directories:
            return False
        try:
            Path(key).rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False   # not empty
        self._directories.remove(key)
        self._save()
        return True

    def remove_all(self, keep_directories: Iterable[Path | str] = ()) -> RemovalReport:
        """Undo every install: remove or restore each recorded file that is
        still as the charm left it, then remove the charm's empty directories
        (but those in keep_directories), then forget everything. A second
        call is a quiet no-op."""
        report = RemovalReport()
        keep = {str(_absolute(d)) for d in keep_directories}
        for key in reversed(list(self._files)):
            self._undo_file(Path(key), self._files[key], report)
        for key in reversed(self._directories):  # deepest first
            directory = Path(key)
            if key in keep:
                continue
            try:
                directory.rmdir()
                report.directories_removed.append(directory)
            except OSError:
                pass  # not empty (someone else's files), or already gone
        self._forget()
        return report

    # -- internals ------------------------------------------------------------

    def _undo_file(self, path: Path, entry: dict[str, Any], report: RemovalReport) -> None:
        _drop_temp(path)
        if not os.path.lexists(path):
            report.gone.append(path)
            return
        ours = {entry.get("sha256"), entry.get("previous")} - {None}
        if _content_hash(path, entry) not in ours:  # None (no regular file) never is
            if entry.get("sole") and not path.is_dir():
                path.unlink()
                report.changed_removed.append(path)
            else:
                report.left_changed.append(path)
            return
        original = entry.get("original")
        if original is None:
            path.unlink()
            report.removed.append(path)
        elif original["kind"] == "symlink":
            temp = path.with_name(f".{path.name}.restore.tmp")
            if os.path.lexists(temp):
                temp.unlink()
            os.symlink(original["target"], temp)
            os.replace(temp, path)
            report.restored.append(path)
        else:
            data = (self._originals / path.relative_to("/")).read_bytes()
            _write_atomically(path, data, original["mode"], owner=original.get("owner"))
            report.restored.append(path)

    def _identify(self, entry: dict[str, Any], path: Path, written: list[int]) -> None:
        """Record the identity of the file the charm just wrote at path (its
        content: entry's sha256; `written`: its device, inode, size and
        mtime as the charm left it) once the file system's clock has moved
        past the tick of that write; within TICK_WAIT, or not at all (the
        file is then hashed when it must be known). Saves the record."""
        identity = _identity(path)
        if identity is not None and identity[:4] == written \
                and _clock_past(path, max(identity[3], identity[4])) \
                and _identity(path) == identity:
            entry["written"] = identity
        self._save()

    def _keep_original(self, path: Path) -> dict[str, Any] | None:
        """Copy what stands at path before the charm first writes it."""
        if path.is_symlink():
            return {"kind": "symlink", "target": os.readlink(path)}
        if not path.is_file():
            return None
        copy = self._originals / path.relative_to("/")
        self._make_private_dirs(copy.parent)
        _write_atomically(copy, path.read_bytes(), 0o600)
        info = path.stat()
        return {"kind": "file", "mode": stat.S_IMODE(info.st_mode),
                "owner": [info.st_uid, info.st_gid]}

    def _make_private_dirs(self, directory: Path) -> None:
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        # mkdir(parents=True) would ignore mode for the intermediate levels.
        for level in reversed([directory, *directory.parents]):
            if level == self.directory or self.directory not in level.parents:
                continue
            if not level.is_dir():
                level.mkdir(mode=0o700)
                os.chmod(level, 0o700)

    def _forget(self) -> None:
        """Delete the record and the kept originals; the directory goes too
        unless something else was put in it."""
        self._files, self._directories = {}, []
        shutil.rmtree(self._originals, ignore_errors=True)
        try:
            self._record_file.unlink()
        except FileNotFoundError:
            pass
        try:
            self.directory.rmdir()
        except OSError:
            pass

    def _load(self) -> None:
        try:
            text = self._record_file.read_bytes()
        except FileNotFoundError:
            return
        try:
            raw = json.loads(text)
            files, directories = raw.get("files", {}), raw.get("directories", [])
            if not isinstance(files, dict) or not isinstance(directories, list) or not all(
                    isinstance(entry, dict) for entry in files.values()):
                raise ValueError("not an install record")
        except (ValueError, AttributeError):
            # A truncated or garbled record proves nothing: taking it for an
            # empty one would have the next install start over as if the
            # charm owned nothing, and keep its own files as "originals".
            raise DamagedRecord(self._record_file, "is unreadable") from None
        self._files = dict(files)
        self._directories = list(directories)

    def _save(self) -> None:
        self._make_private_dirs(self.directory)
        data = json.dumps(
            {"version": 1, "files": self._files, "directories": self._directories},
            indent=1,
        ).encode()
        _write_atomically(self._record_file, data, 0o600)


def _absolute(path: Path | str) -> Path:
    path = Path(path)
    if not path.is_absolute():
        raise ValueError(f"install record paths must be absolute: {path}")
    return path
