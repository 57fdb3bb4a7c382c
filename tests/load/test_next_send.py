"""The next request of a closed-loop user goes out before its event loop reads anything else. Before
it reuses a kept-alive connection, urllib3 polls the socket with a timeout of 0 (has the server
closed it?); gevent answers that poll from its hub, so the user waited for every read its loop had
ready before the request went out (13 ms a request at 250 streams a process on the H200). The
locustfile asks the kernel directly. Checked by order, on Locust's real HttpSession against a
loopback server: while the request is written, no other ready greenlet has run yet (with urllib3's
own check, all of them have). A connection the server closed is still found closed, and the next
request goes out on a new one. The locustfile imports Locust (which patches the standard library
with gevent), so each case runs in its own interpreter. No assertion depends on how fast anything ran."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import REPO

SCRIPT = """
import locust  # first, as Locust's own command line does: it patches the standard library with gevent
import json, socket, sys, threading
sys.path.insert(0, sys.argv[1])
import locustfile
import gevent, urllib3.connection
from locust.clients import HttpSession
from locust.event import Events

close_after_first, kernel_check = sys.argv[2] == "close", sys.argv[3] == "kernel"
if not kernel_check:  # urllib3's own check, as before the locustfile replaced it
    urllib3.connection.HTTPConnection.is_connected = property(
        lambda self: self.sock is not None and not urllib3.util.wait.wait_for_read(self.sock, timeout=0.0))
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(4)
connections = []

def serve():
    while True:
        connection, _ = listener.accept()
        connections.append(connection)
        while True:
            request = b""
            while b"\\r\\n\\r\\n" not in request:
                data = connection.recv(65536)
                if not data:
                    break
                request += data
            if not request:
                break
            connection.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\nok")
            if close_after_first:
                connection.close()
                break

threading.Thread(target=serve, daemon=True).start()
session = HttpSession(f"http://127.0.0.1:{listener.getsockname()[1]}", Events().request, user=None)
assert session.get("/first").text == "ok"
gevent.sleep(0.05)  # the server has answered (and closed the connection, in that case)
ran = []
for number in range(50):  # other greenlets ready to run, as a step's chunks are ready to be read
    gevent.spawn(ran.append, number)
seen_at_write = []
write = urllib3.connection.HTTPConnection.request
def watched(self, *args, **kwargs):
    seen_at_write.append(len(ran))
    return write(self, *args, **kwargs)
urllib3.connection.HTTPConnection.request = watched
second = session.get("/second").text
gevent.sleep(0.05)
print(json.dumps({"second": second, "ran_before_write": seen_at_write[0], "connections": len(connections)}))
"""


def second_request(close: bool, check: str) -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(REPO / "loadtests"), "close" if close else "keep", check],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_next_request_is_written_before_the_loop_reads_anything_else():
    outcome = second_request(close=False, check="kernel")
    assert outcome == {"second": "ok", "ran_before_write": 0, "connections": 1}, outcome


def test_with_urllib3s_own_check_every_ready_greenlet_ran_first():
    """What the kernel's poll is for: gevent's poll with a timeout of 0 lets the hub run first."""
    outcome = second_request(close=False, check="urllib3")
    assert outcome["second"] == "ok" and outcome["ran_before_write"] == 50, outcome


def test_a_connection_the_server_closed_is_found_and_replaced():
    outcome = second_request(close=True, check="kernel")
    assert outcome["second"] == "ok" and outcome["connections"] == 2, outcome  # (a new connection may wait for its connect)
