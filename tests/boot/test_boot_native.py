"""End to end: tiny-cpu boots natively, streams a chat completion, stops with nothing left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import free_port

from rig.boot import BootFailed, driver_for
from rig.boot.checks import check_boot
from rig.boot.process import group_alive
from rig.boot.state import current_boot
from rig.chat import stream_chat
from rig.deploy.recipe import load

pytestmark = pytest.mark.e2e


def _group_gone(pgid: int) -> bool:
    """No process of the group runs (an exited one may still wait for init to reap it)."""
    return not group_alive(pgid)


def test_boot_stream_stop(results_dir, capsys):
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=free_port(), progress=False)
    try:
        assert record.status == "healthy" and record.served_model and record.healthy_after_s > 0
        assert current_boot("tiny-cpu").boot_id == record.boot_id
        result = stream_chat(record.base_url, record.served_model, "hello", max_tokens=12)
        assert result.usage["completion_tokens"] == 12 and result.chunks >= 1
        assert check_boot(record, resolved).ok
    finally:
        driver.down(record)
    assert _group_gone(record.pid)
    assert current_boot("tiny-cpu") is None
    saved = json.loads((Path(record.boot_dir) / "boot.json").read_text())
    assert saved["status"] == "stopped" and Path(saved["log_path"]).stat().st_size > 0


def test_token_delay_arms_inside_the_real_server(results_dir):
    resolved = load("tiny-cpu:delay")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=free_port(), progress=False)
    try:
        stream_chat(record.base_url, record.served_model, "hi", max_tokens=4)
        check = check_boot(record, resolved)
    finally:
        driver.down(record)
    assert check.ok, check.problems
    assert "token_delay ARMED" in record.log_text()
    assert check.adapters["token_delay"] == ["armed"]
    manifests = list(Path(record.manifest_dir).glob("manifest-*.json"))
    entry = json.loads(manifests[0].read_text())["adapters"]["token_delay"]
    assert entry["gate"] == {"RIG_TOKEN_DELAY_MS": "5"} and entry["first_use"] is not None


def test_failed_boot_is_reported_and_cleaned_up(results_dir):
    resolved = load("tiny-cpu")
    resolved.server_args = [*resolved.server_args, "--no-such-flag"]
    driver = driver_for(resolved)
    with pytest.raises(BootFailed, match="stopped before it was healthy"):
        driver.up(resolved, port=free_port(), progress=False)
    assert current_boot("tiny-cpu") is None
    boots = list((results_dir / "boots").glob("*/boot.json"))
    saved = json.loads(boots[0].read_text())
    assert saved["status"] == "failed" and _group_gone(saved["pid"])
    assert "no-such-flag" in Path(saved["log_path"]).read_text()


FOREIGN_SERVER = """
import http.server, sys
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
"""


def test_a_boot_whose_port_another_program_took_is_not_healthy(results_dir, monkeypatch):
    """Another program binds the port after rig's check and answers /health: the boot's own server
    dies of EADDRINUSE, and the answer is not its own. The boot fails, and the other program is
    left alone (rig compare would otherwise have measured someone else's server)."""
    import subprocess
    import sys
    import time
    import urllib.request

    import rig.boot.native

    port = free_port()
    foreign = subprocess.Popen([sys.executable, "-c", FOREIGN_SERVER, str(port)])
    try:
        while foreign.poll() is None:  # until it answers (it ran: the test's premise)
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        assert foreign.poll() is None
        monkeypatch.setattr(rig.boot.native, "refuse_if_port_taken", lambda resolved, port: None)  # the race, made certain
        resolved = load("tiny-cpu")
        with pytest.raises(BootFailed):
            driver_for(resolved).up(resolved, port=port, progress=False)
        assert current_boot("tiny-cpu") is None
        saved = json.loads(next((results_dir / "boots").glob("*/boot.json")).read_text())
        assert saved["status"] == "failed" and f"pid {foreign.pid}" in saved["error"] and _group_gone(saved["pid"])
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()
