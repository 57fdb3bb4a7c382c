"""The Locust client's stream reader (rig.load.client.stream: `stream_into`, `reads`, the stall watchdog, `error_kind`) on
Locust's real HttpSession (requests and urllib3, as every rig user reads) against a loopback server
that sends exact bytes: chunked SSE framing split across chunks, several events in one chunk, a body
cut mid-chunk, a server that stops sending mid-body and one that never answers. The Locust file
imports Locust (which patches the standard library with gevent), so each case runs in its own
interpreter. No assertion depends on how fast anything ran."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

SCRIPT = """
import locust  # first, as Locust's own command line does: it patches the standard library with gevent
import json, socket, sys, threading
sys.path.insert(0, sys.argv[1])
import locustfile
from rig.load.client.stream import error_kind, stream_into
from locust.clients import HttpSession
from locust.event import Events

body, ending = json.loads(sys.argv[2]), sys.argv[3]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)

def serve():
    connection, _ = listener.accept()
    request = b""
    while b"\\r\\n\\r\\n" not in request:
        request += connection.recv(65536)
    if ending == "silent":
        threading.Event().wait(30)  # never answers: the watchdog must end the request before its headers
    connection.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\ntransfer-encoding: chunked\\r\\n\\r\\n")
    for piece in body:
        data = piece.encode()
        connection.sendall(b"%x\\r\\n%s\\r\\n" % (len(data), data))
    if ending == "cut":
        connection.sendall(b"40\\r\\ndata: {\\"cho")  # a chunk that promises 64 bytes, then the connection closes
        connection.close()
    elif ending == "stall":
        threading.Event().wait(30)  # sends nothing more: the reader's recv must time out
    else:
        connection.sendall(b"0\\r\\n\\r\\n")
        connection.recv(1)

threading.Thread(target=serve, daemon=True).start()
class Pieces(list):  # what stream_into feeds: each read as it arrived, with its wait in its loop pass
    waits = []
    def feed(self, data, now, waited_us):
        self.append(data.decode())
        self.waits.append(waited_us)

process = locustfile.process
process.passes.watch()  # as Locust's init does
import time
began = time.time()
session = HttpSession(f"http://127.0.0.1:{listener.getsockname()[1]}", Events().request, user=None)
pieces, error = Pieces(), None
watch = process.stalls.watch(0.5)  # as StreamingUser.send: no socket read timeout, the watchdog's
try:
    with session.post("/v1/chat/completions", json={}, stream=True, catch_response=True,
                      timeout=(5, None)) as response:
        stream_into(response, pieces, watch, process.passes)
        response.success()
except Exception as caught:
    error = error_kind(caught)
finally:
    process.stalls.release(watch)
import gevent
written = process.written.get(id(gevent.getcurrent()))  # the request's send time, once urllib3 wrote it whole
print(json.dumps({"body": "".join(pieces), "reads": len(pieces), "error": error, "waits": pieces.waits,
                  "passes_seen": process.passes.earliest > began, "written": written is not None and written >= began}))
"""


def read(body: list[str], ending: str = "done") -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(REPO / "loadtests"), json.dumps(body), ending],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_body_comes_out_whole_one_http_chunk_per_read():
    body = ["data: {\"a\": 1}\n\n", "data: {\"b\"", ": 2}\n\ndata: {\"c\": 3}\n\n", "data: [DONE]\n\n"]
    outcome = read(body)
    assert outcome["body"] == "".join(body) and outcome["error"] is None
    assert outcome["reads"] >= len(body)  # never fewer reads than the chunks sent: no burst stamped late
    # every read says how long after its loop pass began it came, from the pass watcher's stamp
    assert outcome["passes_seen"] and len(outcome["waits"]) == outcome["reads"] and all(isinstance(w, int) and w >= 0 for w in outcome["waits"])
    assert outcome["written"]  # urllib3's request() stamped when it had written the request


def test_a_body_cut_mid_chunk_is_a_cut_stream_after_what_arrived():
    outcome = read(["data: {\"a\": 1}\n\n"], "cut")
    assert outcome["error"] == "stream_cut" and outcome["body"].startswith("data: {\"a\": 1}\n\n")


@pytest.mark.timed  # waits out the 0.5 s read timeout
def test_a_server_that_stops_sending_is_a_read_timeout():
    outcome = read(["data: {\"a\": 1}\n\n"], "stall")
    assert outcome["error"] == "read_timeout" and outcome["body"] == "data: {\"a\": 1}\n\n"


@pytest.mark.timed  # waits out the 0.5 s read timeout
def test_a_server_that_never_answers_is_a_read_timeout_before_any_body():
    outcome = read(["data: {\"a\": 1}\n\n"], "silent")
    assert outcome["error"] == "read_timeout" and outcome["body"] == ""


def test_error_kinds_are_read_by_type():
    """A connect that timed out or was refused is "connection" by its type, whatever it is named."""
    script = """
import locust
import json, sys
sys.path.insert(0, sys.argv[1])
import locustfile, requests, urllib3
from rig.load.client.stream import error_kind
kinds = [error_kind(e) for e in (requests.exceptions.ConnectTimeout("x"), ConnectionRefusedError(111, "x"),
         requests.exceptions.ConnectionError("x"), urllib3.exceptions.ProtocolError("x"), ValueError("Connection"))]
print(json.dumps(kinds))
"""
    result = subprocess.run([sys.executable, "-c", script, str(REPO / "loadtests")], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ["connection", "connection", "connection", "stream_cut", "ValueError"]
