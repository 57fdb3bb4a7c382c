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

    record = types.SimpleNamespace(base_url=dead_worker, served_model="m", ref="tiny-cpu:cb", status="healthy", boot_id="b")
    monkeypatch.setattr(cli.serving, "_running", lambda name, required=True: record)
    assert cli.main(["chat", "tiny-cpu", "hi"]) == 1
    out, err = capsys.readouterr()
    assert "Hello there" in out and "(2 chunks, usage None, finish None" in out
    assert err.strip().splitlines() == [f"rig: server: {dead_worker}: the stream ended after 2 chunk(s) without a finish reason "
                                        "(the server stopped mid-answer); fix: check `rig status` and `rig logs tiny-cpu`"]


def test_chat_with_another_variant_than_the_one_up_is_refused(dead_worker, monkeypatch, capsys):
    import rig.cli as cli

    record = types.SimpleNamespace(base_url=dead_worker, served_model="m", ref="tiny-cpu:cb", status="healthy", boot_id="b")
    monkeypatch.setattr(cli.serving, "_running", lambda name, required=True: record)
    assert cli.main(["chat", "tiny-cpu:serial", "hi"]) == 2
    assert "tiny-cpu:cb is up, not tiny-cpu:serial" in capsys.readouterr().err


def test_chat_with_a_boot_not_yet_healthy_waits_for_it_and_a_server_gone_is_one_line(monkeypatch, capsys):
    """A comparison's boot (or another `rig up`) still booting: nothing to ask yet, said in one line;
    a server that went away between the state check and the request: one line, not urllib3's."""
    from conftest import free_port

    import rig.cli as cli

    record = types.SimpleNamespace(base_url=f"http://127.0.0.1:{free_port()}", served_model=None, ref="tiny-cpu:cb",
                                   status="booting", boot_id="20261207-113556-tiny-cpu.cb-fb9f")
    monkeypatch.setattr(cli.serving, "_running", lambda name, required=True: record)
    assert cli.main(["chat", "tiny-cpu", "hi"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "rig: command line: recipe: boot 20261207-113556-tiny-cpu.cb-fb9f of tiny-cpu is booting, not healthy yet; "
        "fix: wait until `rig status` says it is up, then chat again"]
    record.status = "healthy"
    assert cli.main(["chat", "tiny-cpu", "hi"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"rig: server: {record.base_url}: nothing answers there (the connection was refused or dropped); "
        "fix: check `rig status` and `rig logs tiny-cpu`"]


def test_a_live_process_whose_health_fails_is_unhealthy(dead_worker):
    from rig.boot.health import unhealthy

    record = types.SimpleNamespace(base_url=dead_worker)
    assert unhealthy(record, "/health") == "/health answered 503"
    closed = types.SimpleNamespace(base_url="http://127.0.0.1:9")
    assert unhealthy(closed, "/health").startswith("/health did not answer")


@pytest.mark.parametrize("status", ["healthy", "booting"])
def test_rig_status_says_unhealthy_for_a_live_process_whose_health_fails(dead_worker, tmp_path, monkeypatch, capsys, status):
    """The server's process lives (it answers kill 0 and carries its boot id) but /health says 503:
    UNHEALTHY and exit 1. A boot still starting has no health to probe yet: it says booting."""
    import os
    import subprocess
    import time
    from pathlib import Path

    import rig.cli as cli
    from rig.boot import process as kernel

    boot_id = "20260101-000000-tiny-cpu.cb-0000"
    server = subprocess.Popen(["sleep", "60"], start_new_session=True, env={**os.environ, "RIG_BOOT_ID": boot_id})
    try:
        while Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            time.sleep(0.001)
        me = kernel.identity(server.pid)
        boot_dir = tmp_path / "results" / "boots" / boot_id
        boot_dir.mkdir(parents=True)
        record = {"boot_id": boot_id, "ref": "tiny-cpu:cb", "recipe": "tiny-cpu", "variant": "cb", "driver": "native",
                  "base_url": dead_worker, "boot_dir": str(boot_dir), "log_path": str(boot_dir / "server.log"),
                  "manifest_dir": str(boot_dir / "manifests"), "overlay": {}, "started": 1.0,
                  "healthy_after_s": 1.0 if status == "healthy" else None, "stopped": None, "status": status, "served_model": "m",
                  "pid": server.pid, "pid_start_ticks": me.start_ticks, "kernel_boot_time": me.kernel_boot,
                  "compose_project": None, "compose_files": [], "image": {}, "error": None}
        (tmp_path / "state").mkdir()
        (tmp_path / "state" / "tiny-cpu.json").write_text(__import__("json").dumps(record))
        monkeypatch.setenv("RIG_STATE_DIR", str(tmp_path / "state"))
        monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
        code = cli.main(["status"])
        out = capsys.readouterr().out
    finally:
        server.kill()
        server.wait()
    if status == "healthy":
        assert code == 1 and "UNHEALTHY (/health answered 503; `rig logs tiny-cpu` says why)" in out, out
    else:
        assert code == 0 and " booting  boot " in out, out


@pytest.mark.parametrize("overlay", [["RIG_IMAGE_TAG=v2"], ["RIG_IMAGE_TAG=v2", "RIG_TOKEN_DELAY_MS=2"], ["HF_TOKEN=a,b", "OMP_NUM_THREADS=2"]])
def test_rig_up_env_that_is_legitimate_reaches_the_boot(overlay, monkeypatch):
    """`rig up --env` resolves its overlay as an arm does; an image tag on a compose recipe (compose's
    image selector, no engine variable), a gate and a secret with a comma still reach the driver."""
    import rig.boot as boot
    import rig.cli as cli

    class Reached(Exception):
        pass

    class Driver:
        def up(self, resolved, overlay, **_):
            raise Reached(overlay)

    monkeypatch.setattr(boot, "driver_for", lambda resolved, driver=None: Driver())
    args = [item for pair in overlay for item in ("--env", pair)]
    with pytest.raises(Reached) as reached:
        cli.main(["up", "tiny-cpu-docker", *args])
    assert reached.value.args[0] == dict(pair.split("=", 1) for pair in overlay)
