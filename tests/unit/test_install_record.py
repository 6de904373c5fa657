"""The install record: stop removes exactly what the charm installed (LP #1866869)."""
import hashlib
import json
import os
import stat

import pytest

from charms.flannel.adapters.install_record import InstallRecord


@pytest.fixture
def record_dir(tmp_path):
    return tmp_path / "unit" / "flannel-install-record"


@pytest.fixture
def record(record_dir):
    return InstallRecord(record_dir)


@pytest.fixture
def bin_dir(tmp_path):
    path = tmp_path / "opt" / "cni" / "bin"
    path.mkdir(parents=True)
    return path


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_install_writes_a_new_file_with_its_mode(record, bin_dir):
    target = bin_dir / "flannel"
    assert record.install(target, b"plugin v1", 0o755) is True
    assert target.read_bytes() == b"plugin v1"
    assert mode_of(target) == 0o755
    assert record.recorded_paths() == [target]
    assert record.is_recorded(target)


def test_the_record_holds_sha256_and_mode(record, record_dir, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"plugin v1", 0o755)
    saved = json.loads((record_dir / "record.json").read_text())["files"][str(target)]
    assert saved["sha256"] == hashlib.sha256(b"plugin v1").hexdigest()
    assert saved["mode"] == 0o755
    assert saved["original"] is None


def test_checksum_is_the_recorded_sha256(record, bin_dir):
    target = bin_dir / "flannel"
    assert record.checksum(target) is None
    record.install(target, b"plugin v1", 0o755)
    assert record.checksum(target) == hashlib.sha256(b"plugin v1").hexdigest()
    record.install(target, b"plugin v2", 0o755)
    assert record.checksum(target) == hashlib.sha256(b"plugin v2").hexdigest()


def test_installing_the_same_content_again_reports_no_change(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"plugin v1", 0o755)
    inode = target.stat().st_ino
    assert record.install(target, b"plugin v1", 0o755) is False
    assert target.stat().st_ino == inode  # not rewritten


def test_a_mode_change_alone_is_applied_without_reporting_new_content(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"plugin v1", 0o755)
    assert record.install(target, b"plugin v1", 0o700) is False
    assert mode_of(target) == 0o700


def test_a_recorded_unchanged_file_is_replaced_and_its_hash_updated(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"plugin v1", 0o755)
    assert record.install(target, b"plugin v2", 0o755) is True
    assert target.read_bytes() == b"plugin v2"
    report = record.remove_all()
    assert report.removed == [target] and not target.exists()


def test_the_record_survives_a_new_instance(record_dir, bin_dir):
    target = bin_dir / "flannel"
    InstallRecord(record_dir).install(target, b"plugin", 0o755)
    again = InstallRecord(record_dir)  # the next hook
    assert again.recorded_paths() == [target]
    assert again.remove_all().removed == [target]
    assert not target.exists()


def test_remove_all_deletes_what_the_charm_installed(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"plugin", 0o755)
    report = record.remove_all()
    assert report.removed == [target]
    assert not target.exists()
    assert bin_dir.is_dir()  # existed before the charm: kept


def test_a_pre_existing_file_is_restored_byte_for_byte_with_its_mode(record, bin_dir):
    # A principal of the plugins-v0.7 era had put its own flannel plugin there.
    target = bin_dir / "flannel"
    original = os.urandom(4096) + b"\x00worker's flannel plugin"
    target.write_bytes(original)
    os.chmod(target, 0o751)
    assert record.install(target, b"charm's flannel plugin", 0o755) is True
    assert target.read_bytes() == b"charm's flannel plugin"
    assert mode_of(target) == 0o755
    report = record.remove_all()
    assert report.restored == [target]
    assert target.read_bytes() == original
    assert mode_of(target) == 0o751


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_pre_existing_file_gets_its_owner_back(record, bin_dir):
    """The 2020 kubernetes-worker extracts its cni-plugins with `tar xfz` as
    root, which keeps the archive's owners (1001:127 here): the worker's
    flannel goes back with that owner, not root's."""
    target = bin_dir / "flannel"
    target.write_bytes(b"worker's flannel plugin")
    os.chown(target, 1001, 127)
    os.chmod(target, 0o755)
    record.install(target, b"charm's flannel plugin", 0o755)
    assert (target.stat().st_uid, target.stat().st_gid) == (0, 0)
    record.remove_all()
    assert target.read_bytes() == b"worker's flannel plugin"
    assert (target.stat().st_uid, target.stat().st_gid) == (1001, 127)
    assert mode_of(target) == 0o755


def test_the_original_is_kept_from_the_first_install_only(record, bin_dir):
    target = bin_dir / "flannel"
    target.write_bytes(b"original")
    record.install(target, b"v1", 0o755)
    record.install(target, b"v2", 0o755)  # v1 must not become "the original"
    record.remove_all()
    assert target.read_bytes() == b"original"


def test_a_pre_existing_symlink_is_restored_as_a_symlink(record, bin_dir):
    target = bin_dir / "flannel"
    os.symlink("/usr/lib/cni/flannel", target)
    record.install(target, b"charm's plugin", 0o755)
    assert not target.is_symlink()
    assert record.remove_all().restored == [target]
    assert os.readlink(target) == "/usr/lib/cni/flannel"


def test_a_file_changed_since_is_left_alone_and_reported(record, bin_dir):
    # e.g. a principal re-extracted its own flannel plugin over the charm's.
    target = bin_dir / "flannel"
    record.install(target, b"charm's plugin", 0o755)
    target.write_bytes(b"principal's plugin")
    report = record.remove_all()
    assert report.left_changed == [target]
    assert report.removed == [] and report.restored == []
    assert target.read_bytes() == b"principal's plugin"


def test_a_changed_file_is_left_even_when_an_original_was_kept(record, bin_dir):
    target = bin_dir / "flannel"
    target.write_bytes(b"original")
    record.install(target, b"charm's", 0o755)
    target.write_bytes(b"someone else's")
    assert record.remove_all().left_changed == [target]
    assert target.read_bytes() == b"someone else's"


def test_a_file_replaced_by_a_symlink_since_is_left_alone(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"charm's", 0o755)
    target.unlink()
    os.symlink("/elsewhere", target)
    assert record.remove_all().left_changed == [target]
    assert os.readlink(target) == "/elsewhere"


def test_a_file_gone_since_is_nothing_to_do(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"charm's", 0o755)
    target.unlink()
    report = record.remove_all()
    assert report.gone == [target]
    assert not target.exists()


def test_neighbours_never_recorded_are_untouched(record, bin_dir):
    # The bug: bridge and host-local belonged to kubernetes-worker.
    neighbours = {"bridge": b"bridge plugin", "host-local": b"host-local plugin",
                  "loopback": b"loopback plugin"}
    for name, data in neighbours.items():
        (bin_dir / name).write_bytes(data)
        os.chmod(bin_dir / name, 0o755)
    record.install(bin_dir / "flannel", b"charm's plugin", 0o755)
    record.remove_all()
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted(neighbours)
    for name, data in neighbours.items():
        assert (bin_dir / name).read_bytes() == data


def test_a_second_remove_all_is_a_quiet_no_op(record, record_dir, bin_dir):
    record.install(bin_dir / "flannel", b"charm's plugin", 0o755)
    record.remove_all()
    (bin_dir / "flannel").write_bytes(b"a principal's plugin, after the stop")
    report = record.remove_all()
    assert report.removed == report.restored == report.left_changed == report.gone == []
    assert (bin_dir / "flannel").read_bytes() == b"a principal's plugin, after the stop"
    assert InstallRecord(record_dir).remove_all().removed == []


def test_remove_all_on_a_never_used_record_is_a_quiet_no_op(tmp_path):
    report = InstallRecord(tmp_path / "never-used").remove_all()
    assert report.removed == report.restored == report.left_changed == report.gone == []
    assert not (tmp_path / "never-used").exists()


def test_remove_all_forgets_everything(record, record_dir, bin_dir):
    target = bin_dir / "flannel"
    target.write_bytes(b"original")
    record.install(target, b"charm's", 0o755)
    record.remove_all()
    assert record.recorded_paths() == []
    assert not record_dir.exists()
    # A later install on the same unit starts clean: the file there then is the original.
    record.install(target, b"charm's again", 0o755)
    record.remove_all()
    assert target.read_bytes() == b"original"


def test_install_leaves_no_temp_files(record, record_dir, bin_dir):
    for version in range(3):
        record.install(bin_dir / "flannel", b"v%d" % version, 0o755)
    assert leftovers(bin_dir) == []
    assert leftovers(record_dir) == []


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(record, bin_dir):
    target = bin_dir / "flannel"
    record.install(target, b"v1", 0o755)
    with pytest.raises(TypeError):
        record.install(target, "not bytes", 0o755)  # type: ignore[arg-type]
    assert target.read_bytes() == b"v1"
    assert leftovers(bin_dir) == []


def test_the_file_at_path_is_replaced_not_rewritten_in_place(record, bin_dir):
    # A running flanneld keeps its open binary: the new one is a new inode.
    target = bin_dir / "flannel"
    record.install(target, b"v1", 0o755)
    with open(target, "rb") as running:
        record.install(target, b"v2", 0o755)
        assert running.read() == b"v1"
    assert target.read_bytes() == b"v2"


def test_parent_directories_created_are_removed_when_empty(record, tmp_path):
    target = tmp_path / "etc" / "cni" / "net.d" / "10-flannel.conflist"
    record.install(target, b"{}", 0o644)
    report = record.remove_all()
    assert not (tmp_path / "etc").exists()
    assert report.directories_removed == [tmp_path / "etc" / "cni" / "net.d",
                                          tmp_path / "etc" / "cni", tmp_path / "etc"]


def test_directories_created_are_kept_when_others_put_files_in_them(record, tmp_path):
    net_d = tmp_path / "etc" / "cni" / "net.d"
    record.install(net_d / "10-flannel.conflist", b"{}", 0o644)
    (net_d / "05-other.conflist").write_text("{}")
    record.remove_all()
    assert (net_d / "05-other.conflist").read_text() == "{}"
    assert not (net_d / "10-flannel.conflist").exists()


def test_one_directory_the_charm_made_goes_once_empty_and_no_other(record, tmp_path, bin_dir):
    """A subnet-manager change takes the other mode's directory away (its
    files removed first); a directory with someone's files, or that the
    charm did not make, stays."""
    tls = tmp_path / "etc" / "ssl" / "flannel"
    record.install(tls / "client-key.pem", b"k", 0o600)
    assert record.remove_directory(tls) is False   # the key is still there
    record.remove(tls / "client-key.pem")
    assert record.remove_directory(tls) is True
    assert not tls.exists() and (tmp_path / "etc" / "ssl").is_dir()
    assert record.remove_directory(bin_dir) is False and bin_dir.is_dir()
    record.remove_all()
    assert not (tmp_path / "etc").exists()


def test_existing_directories_are_never_removed(record, bin_dir):
    record.install(bin_dir / "flannel", b"x", 0o755)
    record.remove_all()
    assert bin_dir.is_dir()


def test_ensure_directory_applies_its_mode_to_directories_it_creates(record, tmp_path):
    tls = tmp_path / "etc" / "ssl" / "flannel"
    record.ensure_directory(tls, 0o700)
    assert mode_of(tls) == 0o700
    assert mode_of(tmp_path / "etc") == 0o755
    record.install(tls / "client-key.pem", b"secret", 0o600)
    assert mode_of(tls / "client-key.pem") == 0o600
    record.remove_all()
    assert not (tmp_path / "etc").exists()


def test_ensure_directory_leaves_an_existing_directory_and_its_mode(record, tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    record.ensure_directory(existing, 0o700)
    assert mode_of(existing) == 0o755
    record.remove_all()
    assert existing.is_dir()


def test_the_record_and_originals_are_private(record, record_dir, tmp_path):
    key = tmp_path / "etc" / "key.pem"
    key.parent.mkdir()
    key.write_bytes(b"someone's key")
    os.chmod(key, 0o644)
    record.install(key, b"charm's key", 0o600)
    assert mode_of(record_dir) == 0o700
    assert mode_of(record_dir / "record.json") == 0o600
    kept = record_dir / "originals" / key.relative_to("/")
    assert kept.read_bytes() == b"someone's key"
    assert mode_of(kept) == 0o600
    for level in [kept.parent, *kept.parent.parents]:
        if level == record_dir:
            break
        assert mode_of(level) == 0o700, level


def test_a_directory_at_the_path_is_refused(record, bin_dir):
    (bin_dir / "flannel").mkdir()
    with pytest.raises(IsADirectoryError):
        record.install(bin_dir / "flannel", b"x", 0o755)
    assert record.recorded_paths() == []


def test_relative_paths_are_refused(record):
    with pytest.raises(ValueError, match="absolute"):
        record.install("opt/cni/bin/flannel", b"x", 0o755)


def test_a_file_someone_put_over_ours_is_kept_by_the_next_install_and_restored(record, bin_dir):
    """A principal re-extracts its own `flannel` over the
    charm's; the charm's next install must keep the principal's file as the
    original and stop must put it back, not delete the charm's copy and
    leave the node without the principal's plugin."""
    target = bin_dir / "flannel"
    record.install(target, b"charm's plugin", 0o755)
    target.write_bytes(b"the worker's plugin")
    os.chmod(target, 0o750)
    assert record.install(target, b"charm's plugin", 0o755) is True
    assert target.read_bytes() == b"charm's plugin"
    report = record.remove_all()
    assert report.restored == [target]
    assert target.read_bytes() == b"the worker's plugin"
    assert mode_of(target) == 0o750


def test_the_newest_foreign_file_replaces_an_older_original(record, bin_dir):
    target = bin_dir / "flannel"
    target.write_bytes(b"worker v1")
    record.install(target, b"charm's plugin", 0o755)
    target.write_bytes(b"worker v2")
    record.install(target, b"charm's plugin", 0o755)
    record.remove_all()
    assert target.read_bytes() == b"worker v2"


def test_an_adopted_file_keeps_no_original_and_is_removed(record, record_dir, bin_dir):
    target = bin_dir / "flanneld"
    target.write_bytes(b"old charm's flanneld")
    os.chmod(target, 0o644)
    assert record.adopt(target, 0o600) is True
    assert mode_of(target) == 0o600
    assert not (record_dir / "originals").exists()
    assert record.checksum(target) == hashlib.sha256(b"old charm's flanneld").hexdigest()
    # The charm's own install over it keeps nothing either.
    record.install(target, b"new flanneld", 0o755)
    report = record.remove_all()
    assert report.removed == [target] and not target.exists()


def test_adopt_refuses_absent_and_recorded_files(record, bin_dir):
    assert record.adopt(bin_dir / "absent") is False
    target = bin_dir / "flannel"
    target.write_bytes(b"worker's")
    record.install(target, b"charm's", 0o755)
    assert record.adopt(target) is False
    record.remove_all()
    assert target.read_bytes() == b"worker's"


def test_an_adopted_directory_goes_when_empty(record, tmp_path):
    directory = tmp_path / "etc" / "ssl" / "flannel"
    directory.mkdir(parents=True)
    os.chmod(directory, 0o755)
    assert record.adopt_directory(directory, 0o700) is True
    assert mode_of(directory) == 0o700
    report = record.remove_all()
    assert report.directories_removed == [directory] and not directory.exists()


def test_directories_to_keep_stay_even_when_the_charm_made_them_and_they_are_empty(
        record, tmp_path):
    # /etc/cni/net.d is the container runtime's: containerd watches it with
    # inotify, and a removed directory loses the watch for good.
    net_d = tmp_path / "etc" / "cni" / "net.d"
    record.install(net_d / "10-flannel.conflist", b"{}", 0o644)
    report = record.remove_all(keep_directories=[net_d])
    assert net_d.is_dir() and list(net_d.iterdir()) == []
    assert report.directories_removed == []   # /etc/cni and /etc are not empty
    assert record.remove_all() == type(report)()   # forgotten: a quiet no-op


def test_holds_says_whether_the_file_is_still_what_the_charm_wrote(record, bin_dir):
    target = bin_dir / "10-flannel.conflist"
    assert record.holds(target) is False          # never recorded
    record.install(target, b"ours", 0o644)
    assert record.holds(target) is True
    target.write_bytes(b"someone else's")
    assert record.holds(target) is False          # changed under us
    target.unlink()
    assert record.holds(target) is False          # gone


# -- a damaged record ------------------------------------------------

def test_a_truncated_record_is_damaged_not_empty(record, record_dir, bin_dir):
    """A record cut short proves nothing: it is not read as "the charm owns
    nothing", which would have the next install keep the charm's own files
    as originals and remove_all delete nothing it should, or worse."""
    from charms.flannel.adapters.install_record import DamagedRecord, record_problem
    record.install(bin_dir / "flannel", b"plugin", 0o755)
    record_file = record_dir / "record.json"
    text = record_file.read_bytes()
    record_file.write_bytes(text[:len(text) // 2])
    with pytest.raises(DamagedRecord) as caught:
        InstallRecord(record_dir)
    assert caught.value.path == record_file
    problem = record_problem(record_dir, expected=True)
    assert problem.startswith(f"Install record {record_file} is unreadable")
    assert record_problem(record_dir, expected=False) == problem
    # nothing was touched by looking
    assert record_file.read_bytes() == text[:len(text) // 2]
    assert (bin_dir / "flannel").read_bytes() == b"plugin"


@pytest.mark.parametrize("garbage", [b"", b"[]", b'{"files": []}', b'{"files": {"/x": 1}}',
                                     b"\xff\xfe", b'{"files": {}, "directories": "x"}'])
def test_a_record_of_the_wrong_shape_is_damaged(record_dir, garbage):
    from charms.flannel.adapters.install_record import DamagedRecord, record_problem
    record_dir.mkdir(parents=True)
    (record_dir / "record.json").write_bytes(garbage)
    with pytest.raises(DamagedRecord):
        InstallRecord(record_dir)
    assert "is unreadable" in record_problem(record_dir, expected=False)


def test_a_missing_record_is_a_problem_only_after_an_install(record, record_dir, bin_dir):
    from charms.flannel.adapters.install_record import record_problem
    assert record_problem(record_dir, expected=False) is None  # a fresh unit
    record.install(bin_dir / "flannel", b"plugin", 0o755)
    assert record_problem(record_dir, expected=True) is None
    (record_dir / "record.json").unlink()
    assert record_problem(record_dir, expected=False) is None
    assert record_problem(record_dir, expected=True) == \
        f"Install record {record_dir / 'record.json'} is missing"


def test_out_of_space_names_the_file_and_its_size():
    import errno
    from charms.flannel.adapters.install_record import out_of_space
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert out_of_space(full, "/usr/local/bin/flanneld", 51_925_712) == \
        "Cannot install /usr/local/bin/flanneld (51.9 MB): No space left on device"
    assert out_of_space(OSError(errno.EDQUOT, "quota"), "/x", 10).startswith("Cannot install /x")
    assert out_of_space(OSError(errno.EACCES, "denied"), "/x", 10) is None


# -- a write that died (a hook SIGKILLed) -----------------------------------
# A child process writes through the record under RLIMIT_FSIZE: with SIGXFSZ at
# its default action the kernel kills it mid-write (as a SIGKILL would: no
# cleanup runs); with SIGXFSZ ignored the write fails (EFBIG) after the record
# was saved, which is the state a kill between the save and the rename leaves.

DIED_WRITING = r"""
import resource, signal, sys
sys.path.insert(0, sys.argv[1])
from charms.flannel.adapters.install_record import InstallRecord
record_dir, target, size, limit = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
die = sys.argv[6] == "die"
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
signal.signal(signal.SIGXFSZ, signal.SIG_DFL if die else signal.SIG_IGN)
record = InstallRecord(record_dir)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
record.install(target, b"v2" * (size // 2), 0o755)
"""


def _write_that_dies(record_dir, target, *, die: bool):
    import signal
    import subprocess
    import sys
    from pathlib import Path
    lib = str(Path(__file__).resolve().parents[2] / "lib")
    run = subprocess.run([sys.executable, "-c", DIED_WRITING, lib, str(record_dir), str(target),
                          str(4 << 20), str(1 << 20), "die" if die else "fail"],
                         capture_output=True, text=True)
    if die:
        assert run.returncode == -signal.SIGXFSZ, run.stderr
    else:
        assert run.returncode == 1 and "OSError" in run.stderr, run.stderr


def test_a_write_killed_midway_leaves_no_temp_file_after_the_retry(record_dir, bin_dir):
    target = bin_dir / "flanneld"
    InstallRecord(record_dir).install(target, b"v1", 0o755)
    _write_that_dies(record_dir, target, die=True)
    assert target.read_bytes() == b"v1"          # the rename never happened
    assert leftovers(bin_dir)                     # the dead write's partial temp file
    retry = InstallRecord(record_dir)
    assert retry.install(target, b"v2" * (2 << 20), 0o755) is True
    assert leftovers(bin_dir) == []
    assert target.read_bytes() == b"v2" * (2 << 20)


def test_stop_after_a_killed_write_leaves_no_temp_file(record_dir, bin_dir):
    target = bin_dir / "flanneld"
    InstallRecord(record_dir).install(target, b"v1", 0o755)
    _write_that_dies(record_dir, target, die=True)
    InstallRecord(record_dir).remove_all()
    assert list(bin_dir.iterdir()) == []


def test_a_retried_upgrade_keeps_no_original_of_the_charms_own_file(record_dir, bin_dir):
    """The record says v2 while v1 (the charm's own) is still on disk: the
    retry must not keep v1 as someone else's original, or stop would put
    the old flanneld back instead of removing it."""
    target = bin_dir / "flanneld"
    InstallRecord(record_dir).install(target, b"v1", 0o755)
    _write_that_dies(record_dir, target, die=False)
    assert target.read_bytes() == b"v1"
    retry = InstallRecord(record_dir)
    retry.install(target, b"v2" * (2 << 20), 0o755)
    report = retry.remove_all()
    assert report.removed == [target] and report.restored == []
    assert list(bin_dir.iterdir()) == []


def test_stop_after_an_upgrade_that_never_landed_removes_the_charms_own_file(
        record_dir, bin_dir):
    """`juju resolve --no-retry`, then removal: the file on disk is the
    charm's previous write, still its own."""
    target = bin_dir / "flanneld"
    InstallRecord(record_dir).install(target, b"v1", 0o755)
    _write_that_dies(record_dir, target, die=False)
    report = InstallRecord(record_dir).remove_all()
    assert report.removed == [target] and report.left_changed == []
    assert list(bin_dir.iterdir()) == []


# A hook SIGKILLed while the record makes a directory: right after mkdir, or
# right after the record was saved and before mkdir.
KILLED_MAKING_A_DIRECTORY = r"""
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from charms.flannel.adapters import install_record
record_dir, target, when = sys.argv[2], Path(sys.argv[3]), sys.argv[4]
real_mkdir = Path.mkdir
def mkdir_then_die(self, *args, **kwargs):
    if self == target.parent:
        if when == "after":
            real_mkdir(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    return real_mkdir(self, *args, **kwargs)
install_record.Path.mkdir = mkdir_then_die
install_record.InstallRecord(record_dir).install(target, b"v1", 0o644)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_hook_killed_around_mkdir_leaves_no_directory_after_stop(record_dir, tmp_path, when):
    import signal
    import subprocess
    import sys
    from pathlib import Path
    lib = str(Path(__file__).resolve().parents[2] / "lib")
    target = tmp_path / "etc" / "ssl" / "flannel" / "client-ca.pem"
    (tmp_path / "etc").mkdir()
    run = subprocess.run([sys.executable, "-c", KILLED_MAKING_A_DIRECTORY, lib,
                          str(record_dir), str(target), when], capture_output=True, text=True)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert (tmp_path / "etc" / "ssl").is_dir()    # made (and recorded) before the kill
    InstallRecord(record_dir).remove_all()
    assert list((tmp_path / "etc").iterdir()) == []


def test_a_directory_someone_makes_meanwhile_is_theirs(record, tmp_path, monkeypatch):
    target = tmp_path / "shared" / "file"
    real_mkdir = type(target).mkdir

    def someone_else_first(self, *args, **kwargs):
        if self == target.parent:
            real_mkdir(self)  # another process wins the race
        return real_mkdir(self, *args, **kwargs)
    monkeypatch.setattr(type(target), "mkdir", someone_else_first)
    record.install(target, b"x", 0o644)
    monkeypatch.undo()
    record.remove_all()
    assert (tmp_path / "shared").is_dir() and not target.exists()


def test_a_unit_file_edited_since_never_becomes_an_original(record, tmp_path):
    """A path only flannel writes (its unit file, conflist, client files):
    someone's edit is overwritten by the next render and the file goes on
    stop. Kept as an "original", stop would put the edit back: a disabled
    flannel.service pointing at the flanneld stop had just deleted."""
    unit = tmp_path / "systemd" / "flannel.service"
    record.install(unit, b"ExecStart=/usr/local/bin/flanneld\n", 0o644, sole=True)
    unit.write_bytes(b"ExecStart=/usr/local/bin/flanneld -v=10\n")
    assert record.holds(unit) is False          # what a hook checks before skipping
    assert record.install(unit, b"ExecStart=/usr/local/bin/flanneld\n", 0o644, sole=True)
    report = record.remove_all()
    assert not unit.exists()
    assert report.restored == [] and report.removed == [unit]


def test_a_sole_path_edited_after_the_last_hook_still_goes_on_stop(record, tmp_path):
    conflist = tmp_path / "net.d" / "10-flannel.conflist"
    conflist.parent.mkdir()
    conflist.write_bytes(b'{"name": "stale, from before"}')
    record.install(conflist, b'{"name": "CDK-flannel-network"}', 0o644, sole=True)
    conflist.write_bytes(b'{"name": "edited"}')
    report = record.remove_all()
    assert not conflist.exists()
    assert report.changed_removed == [conflist] and report.restored == []
    assert not (record.directory / "originals").exists() or not any(
        (record.directory / "originals").rglob("*.conflist"))


# flanneld is 54 MB: the record keeps what identifies it once written, so that
# stop need not read it again; nothing but the untouched file passes for it
LARGE = 2 << 20


def test_a_large_file_untouched_since_is_removed(record, bin_dir):
    target = bin_dir / "flanneld"
    record.install(target, b"f" * LARGE, 0o755)
    record.install(target, b"f" * LARGE, 0o700)   # a mode change alone: a new ctime
    assert record.remove_all().removed == [target]
    assert not target.exists()


def test_a_large_file_rewritten_in_place_with_its_size_and_times_is_left_alone(
        record, bin_dir):
    target = bin_dir / "flanneld"
    record.install(target, b"f" * LARGE, 0o755)
    before = os.stat(target)
    with open(target, "r+b") as handle:   # someone's build, written over ours
        handle.write(b"g")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    report = record.remove_all()
    assert report.left_changed == [target]
    assert target.read_bytes()[:2] == b"gf"


def test_a_large_file_copied_back_unchanged_is_still_the_charms(record, bin_dir, tmp_path):
    target = bin_dir / "flanneld"
    record.install(target, b"f" * LARGE, 0o755)
    copy = tmp_path / "copy"
    copy.write_bytes(target.read_bytes())
    os.replace(copy, target)   # another inode, the same content
    assert record.holds(target)
    assert record.remove_all().removed == [target]


def test_stop_removes_a_large_file_untouched_since_without_reading_it(
        record, record_dir, bin_dir, monkeypatch):
    from charms.flannel.adapters import install_record
    target = bin_dir / "flanneld"
    record.install(target, b"f" * LARGE, 0o755)
    record.install(target, b"f" * LARGE, 0o700)   # a mode change alone: a new ctime
    assert leftovers(bin_dir) == []   # (the clock is read with the path's temp file)
    saved = json.loads((record_dir / "record.json").read_text())["files"][str(target)]
    if "written" not in saved:
        pytest.skip("the file system's clock did not tick between the write and the record")

    def read(path):
        raise AssertionError(f"{path} read again")
    monkeypatch.setattr(install_record, "_sha256_file", read)
    assert InstallRecord(record_dir).remove_all().removed == [target]
