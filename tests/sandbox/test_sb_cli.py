"""How a `python -m sandbox` command that brings a cluster up ends: killed or
interrupted, its cluster's teardown runs; a ClusterError is one line."""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A command whose body holds a "cluster" (a `with` whose exit leaves a mark)
# and waits, as demo and conformance do for minutes.
COMMAND = textwrap.dedent("""
    import contextlib, signal, sys, time
    from pathlib import Path
    from sandbox.cli import run_with_cluster
    from sandbox.cluster import ClusterError

    # Ctrl-C as a shell leaves it: pytest-xdist's workers ignore SIGINT, and
    # their children inherit that
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mark = Path(sys.argv[1])

    @contextlib.contextmanager
    def cluster():
        try:
            yield
        finally:
            mark.write_text("torn down")

    def body():
        with cluster():
            if sys.argv[2] == "fail":
                raise ClusterError("etcd never answered")
            print("up", flush=True)
            time.sleep(60)
        return 0

    sys.exit(run_with_cluster("demo", body))
""")


def start(tmp_path: Path, how: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", COMMAND, str(tmp_path / "mark"), how],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_killed_command_tears_its_cluster_down(tmp_path):
    command = start(tmp_path, "wait")
    assert command.stdout.readline() == "up\n"
    command.send_signal(signal.SIGTERM)
    out, err = command.communicate(timeout=30)
    assert command.returncode == 130
    assert (tmp_path / "mark").read_text() == "torn down"
    assert err == "interrupted; the sandbox was torn down\n"


def test_ctrl_c_tears_the_cluster_down_too(tmp_path):
    command = start(tmp_path, "wait")
    assert command.stdout.readline() == "up\n"
    command.send_signal(signal.SIGINT)
    command.communicate(timeout=30)
    assert command.returncode == 130
    assert (tmp_path / "mark").read_text() == "torn down"


def test_a_cluster_error_is_one_line_not_a_traceback(tmp_path):
    command = start(tmp_path, "fail")
    out, err = command.communicate(timeout=30)
    assert command.returncode == 1
    assert err == "demo failed: etcd never answered\n"
    assert (tmp_path / "mark").read_text() == "torn down"


def test_the_previous_sigterm_handler_is_back_after_the_command():
    from sandbox.cli import run_with_cluster

    before = signal.getsignal(signal.SIGTERM)
    assert run_with_cluster("demo", lambda: 0) == 0
    assert signal.getsignal(signal.SIGTERM) is before
