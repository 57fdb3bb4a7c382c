"""`rig loadtest --flush-cache` against SGLang's /flush_cache as 0.5.17-0.5.23 serve it: a plain POST
answers 400 while requests run or wait (http_server.py:1025-1040), `?timeout=S` makes the scheduler
defer the flush until it is idle (scheduler_components/flush_wrapper.py). A purpose-built server
with exactly that rule, on loopback: rig asks for the deferral, and a 400 that still comes back
is one line that says what it means."""

from __future__ import annotations

import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from rig.engines import CACHE_RESET_WAIT_S
from rig.errors import RigError
from rig.loadrun.runner import LoadTarget
from rig.loadrun.session import flush_prefix_cache


class _SGLangFlush(BaseHTTPRequestHandler):
    busy_for_ever = False
    seen: list[dict[str, list[str]]] = []

    def do_POST(self) -> None:  # noqa: N802 - the handler's name is http.server's
        url = urlparse(self.path)
        query = parse_qs(url.query)
        type(self).seen.append(query)
        waits = float(query.get("timeout", ["0"])[0]) > 0
        ok = url.path == "/flush_cache" and waits and not self.busy_for_ever
        body = b"Cache flushed.\n" if ok else b"Flush cache failed.\n"
        self.send_response(200 if ok else 400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sglang_flush():
    _SGLangFlush.seen, _SGLangFlush.busy_for_ever = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SGLangFlush)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    record = types.SimpleNamespace(base_url=f"http://127.0.0.1:{server.server_address[1]}", boot_id="b")
    yield LoadTarget(resolved=None, record=record, model_dir=None, engine="sglang")
    server.shutdown()


def test_sglang_is_asked_to_wait_until_idle(sglang_flush):
    assert flush_prefix_cache(sglang_flush) == "prefix cache flushed (/flush_cache)"
    assert _SGLangFlush.seen == [{"timeout": [str(CACHE_RESET_WAIT_S)]}]


def test_a_flush_still_refused_says_the_engine_stayed_busy(sglang_flush):
    _SGLangFlush.busy_for_ever = True
    with pytest.raises(RigError) as caught:
        flush_prefix_cache(sglang_flush)
    line = str(caught.value)
    assert "--flush-cache" in line and "answered 400" in line
    assert f"still running or waiting after SGLang's own {CACHE_RESET_WAIT_S} s wait" in line
