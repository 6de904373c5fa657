"""The benchmark's hook profile (charms/flannel/hook_profile.py): what a hook
ran, and which command lines it ran more than once."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


# A "hook" that makes no request; or ("request") one HTTP request to a server of
# its own and one TLS socket, with ("early") http.client and ssl imported
# before the profile starts. It says at its end whether those were loaded.
REQUESTING_HOOK = textwrap.dedent("""
    import sys, threading
    if "early" in sys.argv:
        import http.client, ssl
    sys.path.insert(0, sys.argv[1])
    from charms.flannel.hook_profile import profiled

    def hook():
        if "request" in sys.argv:
            import http.client, http.server, socket, ssl
            server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
            threading.Thread(target=server.handle_request, daemon=True).start()
            connection = http.client.HTTPConnection("127.0.0.1", server.server_port)
            connection.request("GET", "/")
            connection.getresponse().read()
            with ssl.create_default_context().wrap_socket(
                    socket.socket(), server_hostname="localhost", do_handshake_on_connect=False):
                pass
            print(server.server_port)
        print(",".join(name for name in ("http.client", "ssl") if name in sys.modules) or "-")

    profiled(hook, sys.argv[2])
""")


def _profiled(tmp_path, *args) -> tuple[list[str], dict]:
    ran = subprocess.run([sys.executable, "-c", REQUESTING_HOOK, str(LIB), str(tmp_path), *args],
                         check=True, capture_output=True, text=True,
                         env={"JUJU_UNIT_NAME": "flannel/0", "PATH": "/usr/bin:/bin"})
    record = json.loads((tmp_path / "flannel-0.jsonl").read_text().splitlines()[-1])
    return ran.stdout.split(), record


def test_the_profile_loads_no_http_client_or_ssl_of_its_own(tmp_path):
    # the benchmark's bare charm would otherwise pay for what only flannel imports
    [loaded], record = _profiled(tmp_path)
    assert loaded == "-"
    assert record["http"] == {} and record["tls"] == 0


@pytest.mark.parametrize("imported", ["in the hook", "early"])
def test_the_requests_and_tls_sockets_of_a_hook_are_counted(tmp_path, imported):
    [port, _], record = _profiled(tmp_path, "request", imported)
    assert record["http"] == {f"127.0.0.1:{port}": 1}
    assert record["tls"] == 1
