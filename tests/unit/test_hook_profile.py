"""The benchmark's hook profile (charms/flannel/hook_profile.py): what a hook
ran, and which command lines it ran more than once."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib"

# A "hook" asking systemd the same question twice and ip two different ones;
# run in a process of its own: profiled() patches subprocess for good.
HOOK = textwrap.dedent("""
    import subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from charms.flannel.hook_profile import profiled

    def hook():
        for argv in (["true", "is-active", "flannel"], ["true", "is-active", "flannel"],
                     ["echo", "link"], ["echo", "route"]):
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)

    profiled(hook, sys.argv[2])
""")


def test_a_command_line_run_twice_in_one_hook_is_named_with_its_count(tmp_path):
    subprocess.run([sys.executable, "-c", HOOK, str(LIB), str(tmp_path)], check=True,
                   env={"JUJU_UNIT_NAME": "flannel/0", "PATH": "/usr/bin:/bin"})
    [record] = [json.loads(line) for line in
                (tmp_path / "flannel-0.jsonl").read_text().splitlines()]
    assert record["commands"] == {"true": 2, "echo": 2}
    assert record["repeated"] == {"true is-active flannel": 2}
