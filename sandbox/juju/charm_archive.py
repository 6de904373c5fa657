"""A packed charm (`.charm`, a zip) unpacked as Juju unpacks it on deploy:
every member under the charm dir, with the file modes the packer kept (hooks
must stay executable)."""
from __future__ import annotations

import stat
import zipfile
from pathlib import Path


class BadCharmArchive(Exception):
    pass


def unpack(archive: Path, dest: Path) -> Path:
    """Unpacks `archive` into `dest` (created; must not exist) and returns it."""
    dest.mkdir(parents=True)
    root = dest.resolve()
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            target = (dest / info.filename).resolve()
            if root not in target.parents and target != root:
                raise BadCharmArchive(f"{archive}: {info.filename} is outside the charm")
            mode = info.external_attr >> 16
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if stat.S_ISLNK(mode):
                link = z.read(info).decode()
                pointed = (target.parent / link).resolve()
                if link.startswith("/") or (root not in pointed.parents and pointed != root):
                    raise BadCharmArchive(f"{archive}: {info.filename} links out of the charm")
                target.symlink_to(link)
                continue
            target.write_bytes(z.read(info))
            file_mode = stat.S_IMODE(mode) or 0o644
            if info.filename.startswith("hooks/"):
                file_mode |= 0o100   # Juju makes every hook executable
            target.chmod(file_mode)
    if not (dest / "metadata.yaml").is_file():
        raise BadCharmArchive(f"{archive} holds no metadata.yaml: not a charm")
    return dest
