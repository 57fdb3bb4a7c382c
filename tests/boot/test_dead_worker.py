"""A server whose process lives while its engine is dead (transformers serve's batching worker
ran out of KV pages: the stream stopped without a finish reason, /health answers 503 from then
on). A purpose-built server with exactly that behaviour, on loopback: `rig chat` exits 1 and says
the stream was cut, `rig status` says UNHEALTHY and exits 1."""

from __future__ import annotations

import json
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _DeadWorker(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes, as a cut stream does

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"status":"unhealthy","reason":"cb_worker_dead"}'
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for word in ("Hello", " there"):  # two tokens, then the worker dies: no finish_reason, no [DONE]
            chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dead_worker():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DeadWorker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_cut_stream_fails_rig_chat_and_names_it(dead_worker, monkeypatch, capsys):
    import rig.cli as cli

    record = types.SimpleNamespace(base_url=dead_worker, served_model="m", ref="tiny-cpu:cb")
    monkeypatch.setattr(cli, "_running", lambda name, required=True: record)
    assert cli.main(["chat", "tiny-cpu", "hi"]) == 1
    out, err = capsys.readouterr()
    assert "Hello there" in out and "(2 chunks, usage None, finish None" in out
    assert err.strip().splitlines() == [f"rig: server: {dead_worker}: the stream ended after 2 chunk(s) without a finish reason "
                                        "(the server stopped mid-answer); fix: check `rig status` and `rig logs tiny-cpu`"]


def test_chat_with_another_variant_than_the_one_up_is_refused(dead_worker, monkeypatch, capsys):
    import rig.cli as cli

    record = types.SimpleNamespace(base_url=dead_worker, served_model="m", ref="tiny-cpu:cb")
    monkeypatch.setattr(cli, "_running", lambda name, required=True: record)
    assert cli.main(["chat", "tiny-cpu:serial", "hi"]) == 2
    assert "tiny-cpu:cb is up, not tiny-cpu:serial" in capsys.readouterr().err


def test_a_live_process_whose_health_fails_is_unhealthy(dead_worker):
    from rig.boot.health import unhealthy

    record = types.SimpleNamespace(base_url=dead_worker)
    assert unhealthy(record, "/health") == "/health answered 503"
    closed = types.SimpleNamespace(base_url="http://127.0.0.1:9")
    assert unhealthy(closed, "/health").startswith("/health did not answer")
