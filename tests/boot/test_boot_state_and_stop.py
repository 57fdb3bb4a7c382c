"""Stale state, double boots, signals and secrets with the native driver."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, free_port, rig_cli

from rig.boot import process as kernel
from rig.boot.process import group_alive
from rig.deploy.render import project_name

pytestmark = pytest.mark.e2e


@pytest.fixture
def rig_dirs(tmp_path):
    """Environment for `rig` subprocesses: results and state in a temporary directory."""
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}
    yield env, tmp_path
    state = tmp_path / "state" / "tiny-cpu.json"
    if state.exists():  # a failed test must not leave a server running
        rig_cli("down", "tiny-cpu", env=env)


def _group_gone(pgid: int) -> bool:
    """No process of the group runs (an exited one may still wait for init to reap it)."""
    return not group_alive(pgid)


def _files(*roots: Path) -> list[Path]:
    return [path for root in roots if root.exists() for path in root.rglob("*") if path.is_file()]


def _cmdlines() -> dict[int, bytes]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
    return found


def test_planted_secret_reaches_the_server_and_nothing_else(rig_dirs):
    env, root = rig_dirs
    planted = f"sk-planted-{secrets.token_hex(6)}"
    up = rig_cli("up", "tiny-cpu", "--port", str(free_port()), "--env", f"HF_TOKEN={planted}",
                 "--env", "RIG_TOKEN_DELAY_MS=0", "--env", "OMP_NUM_THREADS=1", env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    state = json.loads((root / "state" / "tiny-cpu.json").read_text())
    pid = state["pid"]
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={planted}".encode() in environ  # the server really got it
        assert f"RIG_BOOT_ID={state['boot_id']}".encode() in environ
        leaks = [p for p, line in _cmdlines().items() if planted.encode() in line]
        assert leaks == [], f"argv of {leaks} carries the secret"
        again = rig_cli("up", "tiny-cpu", "--port", str(free_port()), env=env)
        assert again.returncode == 2 and "still up" in again.stderr and "rig down tiny-cpu" in again.stderr, again.stderr
        assert len(again.stderr.strip().splitlines()) == 1
        status = rig_cli("status", env=env)
        assert status.returncode == 0 and " up  boot " + state["boot_id"] in status.stdout and planted not in status.stdout
    finally:
        down = rig_cli("down", "tiny-cpu", env=env)
    assert down.returncode == 0, down.stderr
    assert _group_gone(pid)
    record = json.loads(next((root / "results" / "boots").glob("*/boot.json")).read_text())
    assert record["overlay"] == {"HF_TOKEN": "<redacted>", "RIG_TOKEN_DELAY_MS": "0", "OMP_NUM_THREADS": "1"}
    assert record["pid_start_ticks"] == state["pid_start_ticks"] and record["kernel_boot_time"] > 0
    written = _files(root, REPO / "results", REPO / ".rig", REPO / "docker", REPO / "compose")
    assert any(path.name == "boot.json" for path in written) and any(path.name == "server.log" for path in written)
    leaked = [str(path) for path in written if planted.encode() in path.read_bytes()]
    assert leaked == []


def _victim() -> subprocess.Popen:
    victim = subprocess.Popen(["setsid", "sleep", "300"])
    deadline = time.monotonic() + 5
    while kernel.process_group(victim.pid) != victim.pid:  # setsid has exec'd sleep as a group leader
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return victim


def _stale_state(root: Path, pid: int, identity: kernel.Identity | None) -> Path:
    boot_dir = root / "results" / "boots" / "20260101-000000-tiny-cpu.cb-0000"
    boot_dir.mkdir(parents=True)
    record = {
        "boot_id": boot_dir.name, "ref": "tiny-cpu:cb", "recipe": "tiny-cpu", "variant": "cb", "driver": "native",
        "base_url": "http://127.0.0.1:8321", "boot_dir": str(boot_dir), "log_path": str(boot_dir / "server.log"),
        "manifest_dir": str(boot_dir / "manifests"), "overlay": {}, "started": 1.0, "healthy_after_s": 1.0,
        "stopped": None, "status": "healthy", "served_model": "m", "pid": pid,
        "pid_start_ticks": identity.start_ticks if identity else None,
        "kernel_boot_time": identity.kernel_boot if identity else None,
        "compose_project": None, "compose_files": [], "image": {}, "error": None,
    }
    state = root / "state" / "tiny-cpu.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(record))
    return state


@pytest.mark.parametrize("recorded", ["earlier start", "no start recorded"])
def test_down_leaves_an_unrelated_group_leader_alone(rig_dirs, recorded):
    env, root = rig_dirs
    victim = _victim()
    try:
        now = kernel.identity(victim.pid)
        earlier = kernel.Identity(now.start_ticks - 100, now.kernel_boot) if recorded == "earlier start" else None
        state = _stale_state(root, victim.pid, earlier)
        status = rig_cli("status", env=env)
        assert "DOWN (" in status.stdout and f"pid {victim.pid}" in status.stdout, status.stdout
        assert status.returncode == 1, status.returncode
        down = rig_cli("down", "tiny-cpu", env=env)
        assert down.returncode == 0, down.stderr
        assert "stale state" in down.stdout and "nothing was signalled" in down.stdout
        assert victim.poll() is None and not _group_gone(victim.pid)
        assert not state.exists()
        saved = json.loads((root / "results" / "boots" / "20260101-000000-tiny-cpu.cb-0000" / "boot.json").read_text())
        assert saved["status"] == "stopped" and saved["error"].startswith("stale state")
    finally:
        victim.kill()
        victim.wait()


def test_up_removes_a_stale_state_and_does_not_touch_its_pid(rig_dirs):
    env, root = rig_dirs
    victim = _victim()
    try:
        now = kernel.identity(victim.pid)
        _stale_state(root, victim.pid, kernel.Identity(now.start_ticks + 7, now.kernel_boot))
        up = rig_cli("up", "tiny-cpu", "--port", str(free_port()), env=env)
        assert up.returncode == 0, up.stderr
        assert "removing the stale state of boot 20260101-000000-tiny-cpu.cb-0000" in up.stderr
        assert victim.poll() is None
    finally:
        rig_cli("down", "tiny-cpu", env=env)
        victim.kill()
        victim.wait()


def _deliverable_stop_signals() -> None:
    """rig honours an ignored SIGHUP (nohup), and a blocked one never reaches it, so the test sets the
    dispositions and the mask it depends on: a test run under nohup, or by a CI wrapper that blocks
    SIGHUP (a fresh CI machine did: rig up ran on to healthy and exited 0), would hand rig neither."""
    stop_signals = (signal.SIGTERM, signal.SIGHUP)
    for signum in stop_signals:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_during_up_stops_the_server_and_fails_the_boot(rig_dirs, signum):
    env, root = rig_dirs
    state = root / "state" / "tiny-cpu.json"
    up = subprocess.Popen([sys.executable, "-m", "rig", "up", "tiny-cpu", "--port", str(free_port())], cwd=REPO,
                          env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=_deliverable_stop_signals)
    deadline = time.monotonic() + 60
    while not (state.exists() and json.loads(state.read_text()).get("pid_start_ticks")):
        assert up.poll() is None and time.monotonic() < deadline, up.communicate()
        time.sleep(0.05)
    pid = json.loads(state.read_text())["pid"]
    up.send_signal(signum)
    _, stderr = up.communicate(timeout=60)
    assert up.returncode == 128 + signum, stderr
    assert f"rig: stopped by {signal.Signals(signum).name}" in stderr and "Traceback" not in stderr
    assert _group_gone(pid) and not state.exists()
    record = json.loads(next((root / "results" / "boots").glob("*/boot.json")).read_text())
    assert record["status"] == "failed" and signal.Signals(signum).name in record["error"]


def test_broken_state_files_are_one_line(rig_dirs):
    env, root = rig_dirs
    state = _stale_state(root, 999_999_999, None)
    whole = json.loads(state.read_text())
    variants = {
        "truncated": state.read_text()[:120],
        "extended": json.dumps({**whole, "injected": "x"}),
        "pid as text": json.dumps({**whole, "pid": "1"}),
        "pid as bool": json.dumps({**whole, "pid": True}),
        "missing field": json.dumps({k: v for k, v in whole.items() if k != "boot_dir"}),
        "another schema": json.dumps({**whole, "schema": 2}),
        "not an object": "[]",
        "empty": "",
        "binary": "\udcff\x00",
    }
    for case, text in variants.items():
        state.write_bytes(text.encode(errors="surrogateescape"))
        for command in ("status", "down", "logs"):
            result = rig_cli(command, "tiny-cpu", env=env) if command != "status" else rig_cli("status", env=env)
            output = result.stdout + result.stderr
            assert "Traceback" not in output, (case, command, output)
            assert result.returncode in (1, 2), (case, command, output)
            assert f"{state}: " in output and "not a complete boot record" in output, (case, command, output)
            assert len(output.strip().splitlines()) == 1, (case, command, output)
        assert state.exists(), "a state rig cannot read is never deleted silently"


def test_a_boot_started_with_another_results_directory_is_named_not_called_damaged(rig_dirs):
    """`RIG_RESULTS_DIR=a rig up`, then `RIG_RESULTS_DIR=b rig status`: the state file is whole, its
    paths are a boot's own under a; rig says so and how to reach it, and deletes nothing (the fix it
    gave, delete the state, would have orphaned a running server)."""
    env, root = rig_dirs
    state = _stale_state(root, 999_999_999, None)
    other = {**env, "RIG_RESULTS_DIR": str(root / "elsewhere")}
    for command in ("status", "down", "logs"):
        result = rig_cli(command, "tiny-cpu", env=other) if command != "status" else rig_cli("status", env=other)
        output = result.stdout + result.stderr
        assert result.returncode in (1, 2) and "Traceback" not in output and len(output.strip().splitlines()) == 1, (command, output)
        assert f"RIG_RESULTS_DIR={root / 'results'}" in output, (command, output)
    assert state.exists()


def test_missing_boot_log_is_one_line(rig_dirs):
    env, root = rig_dirs
    _stale_state(root, 999_999_999, None)
    result = rig_cli("logs", "tiny-cpu", env=env)
    assert result.returncode == 2 and "has no server log" in result.stderr and "boot.json" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_logs_of_a_variant_are_that_variants(rig_dirs):
    """`rig logs tiny-cpu:serial` is the serial variant's last boot, also when a later boot of
    another variant exists (it printed the recipe's last log, whatever its variant); the bare name is
    the recipe's last boot; a variant never started is one line."""
    env, root = rig_dirs
    for boot_id, ref, variant in (("20260101-000000-tiny-cpu.serial-0000", "tiny-cpu:serial", "serial"),
                                  ("20260101-000001-tiny-cpu-0001", "tiny-cpu", None)):
        boot_dir = root / "results" / "boots" / boot_id
        boot_dir.mkdir(parents=True)
        (boot_dir / "server.log").write_text(f"the log of {ref}\n")
        (boot_dir / "boot.json").write_text(json.dumps({
            "boot_id": boot_id, "ref": ref, "recipe": "tiny-cpu", "variant": variant, "driver": "native",
            "base_url": "http://127.0.0.1:8321", "boot_dir": str(boot_dir), "log_path": str(boot_dir / "server.log"),
            "manifest_dir": str(boot_dir / "manifests"), "overlay": {}, "started": 1.0, "healthy_after_s": 1.0,
            "stopped": 2.0, "status": "stopped", "served_model": "m", "pid": None, "pid_start_ticks": None,
            "kernel_boot_time": None, "compose_project": None, "compose_files": [], "image": {}, "error": None}))
    for ref, printed in (("tiny-cpu:serial", "tiny-cpu:serial"), ("tiny-cpu", "tiny-cpu")):
        result = rig_cli("logs", ref, env=env)
        assert result.returncode == 0 and result.stdout == f"the log of {printed}\n", (ref, result)
        assert f"rig: {ref} is not up" in result.stderr, result.stderr
    result = rig_cli("logs", "tiny-cpu:cb", env=env)
    assert result.returncode == 2 and "tiny-cpu:cb has never been started here" in result.stderr, result
    assert len(result.stderr.strip().splitlines()) == 1 and not result.stdout, result


def test_compose_record_without_container_is_one_line(rig_dirs, monkeypatch, capsys):
    """`rig status` on a compose boot whose container is gone: one line, no traceback."""
    import types

    import rig.boot.compose as compose
    from rig.cli import main

    env, root = rig_dirs
    state = _stale_state(root, 1, None)
    record = json.loads(state.read_text())
    state.write_text(json.dumps({**record, "driver": "compose", "pid": None, "compose_project": project_name(record["recipe"], record["variant"])}))
    client = types.SimpleNamespace(containers=types.SimpleNamespace(list=lambda **kwargs: []))
    monkeypatch.setattr(compose, "docker_client", lambda: client)
    monkeypatch.setenv("RIG_STATE_DIR", str(root / "state"))
    monkeypatch.setenv("RIG_RESULTS_DIR", str(root / "results"))  # where the record says its boot lives
    assert main(["status"]) == 1  # a server that died without `rig down`: a script checking the status sees it
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "DOWN (tiny-cpu:cb: compose started no container; `rig logs tiny-cpu:cb` says why" in out[0], out


class ArgvWatcher:
    """Samples every process's argv while rig runs: a secret on any command line is a leak, however brief."""

    def __init__(self, needles: list[str]) -> None:
        import threading

        self.needles = [needle.encode() for needle in needles]
        self.leaks: dict[int, bytes] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid, line in _cmdlines().items():
                if any(needle in line for needle in self.needles):
                    self.leaks[pid] = line
            self.samples += 1
            time.sleep(0.1)

    def __enter__(self) -> ArgvWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _hostile_copies(folder: Path) -> dict[str, Path]:
    """Copies of tiny-cpu that try to route the API key into argv, env, names or patterns."""
    import yaml

    cases = {
        "served name by flag": lambda d: d["server_args"].extend(["--served-model-name=${RIG_API_KEY}"]),
        "key flag": lambda d: d["server_args"].extend(["--api-key", "${RIG_API_KEY}"]),
        "env value": lambda d: d["env"].update(OMP_NUM_THREADS="$RIG_API_KEY"),
        "variant env": lambda d: d["variants"]["cb"].update(env={"TOKENIZERS_PARALLELISM": "${RIG_API_KEY:-x}"}),
        "served name": lambda d: d["serving"].update(served_model_name="${RIG_API_KEY}"),
        "bind scope": lambda d: d["serving"].update(bind="fe80::1%${RIG_API_KEY}"),
        "pattern flag": lambda d: d["boot_log"].update(must=["(?i)${RIG_API_KEY}"]) if "boot_log" in d else d.update(
            boot_log={"must": ["(?i)${RIG_API_KEY}"]}),
        "key by name": lambda d: d["env"].update(RIG_API_KEY="x"),
        "preload": lambda d: d["env"].update(LD_PRELOAD="/tmp/x.so"),
    }
    paths = {}
    for case, change in cases.items():
        data = yaml.safe_load((REPO / "recipes" / "tiny-cpu.yaml").read_text())
        change(data)
        path = folder / case.replace(" ", "-") / "tiny-cpu.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(data))
        paths[case] = path
    return paths


def test_planted_key_reaches_no_argv_log_result_or_state_through_boot_load_and_compare(rig_dirs):
    """RIG_API_KEY and HF_TOKEN come from rig's environment only: after hostile recipes, a boot of a
    hostile-but-valid recipe, a load test and a comparison, neither value is on any process's argv,
    in any output, or in any file rig wrote (results, state, rendered files, logs). tiny-cpu's
    transformers serve takes no key, so its boots refuse one; the key then rides the load test's
    requests, and HF_TOKEN every server's environment."""
    import yaml

    env, root = rig_dirs
    key, token = f"sk-planted-{secrets.token_hex(6)}", f"hf-planted-{secrets.token_hex(6)}"
    with_token = {**env, "HF_TOKEN": token}
    with_key = {**with_token, "RIG_API_KEY": key}
    outputs: list[str] = []
    before = {path: path.read_bytes() for path in _files(REPO / "docker", REPO / "compose")}

    def rig(*args: str, environment: dict[str, str] = with_key) -> subprocess.CompletedProcess:
        result = rig_cli(*args, env=environment)
        outputs.append(result.stdout + result.stderr)
        return result

    valid = root / "valid" / "tiny-cpu.yaml"
    valid.parent.mkdir()
    data = yaml.safe_load((REPO / "recipes" / "tiny-cpu.yaml").read_text())
    data["description"] = "hostile but valid: ${RIG_API_KEY} $RIG_API_KEY $$ (a label, escaped)"
    data["variants"]["cb"]["boot_log"] = {"forbid": ["(a+)+$", "(?i:sk-planted|hf-planted)"]}  # the key in the log fails the boot check
    valid.write_text(yaml.safe_dump(data))
    with ArgvWatcher([key, token]) as watcher:
        for case, path in _hostile_copies(root / "hostile").items():
            for command in (("validate", str(path)), ("render", str(path)), ("up", str(path), "--port", str(free_port()))):
                result = rig(*command)
                assert result.returncode in (1, 2), (case, command, result.stdout + result.stderr)
                assert "Traceback" not in outputs[-1] and len(outputs[-1].strip().splitlines()) == 1, (case, outputs[-1])
        assert not (root / "results").exists() and not (root / "state").exists()
        refused = rig("up", str(valid), "--port", str(free_port()))  # a key transformers serve cannot take
        assert refused.returncode == 2 and "RIG_API_KEY" in refused.stderr, refused.stdout + refused.stderr
        up = rig("up", str(valid), "--port", str(free_port()), environment=with_token)
        try:
            assert up.returncode == 0, up.stdout + up.stderr  # healthy, and the boot check found no key in the log
            pid = json.loads((root / "state" / "tiny-cpu.json").read_text())["pid"]
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"HF_TOKEN={token}".encode() in environ  # the server really got it, through its environment
            load = rig("loadtest", str(valid), "--scenario", "prose-c1", "--small", "--workers", "1", "--duration", "2")
            assert load.returncode in (0, 4), load.stdout + load.stderr  # 4: a run INVALID on a busy box; measured all the same
            assert rig("logs", "tiny-cpu").returncode == 0 and rig("status").returncode == 0
        finally:
            down = rig("down", "tiny-cpu")
        assert down.returncode == 0, down.stdout + down.stderr
        compare = rig("compare", "tiny-cpu", "--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY_MS=0",
                      "--boots", "1", "--rounds", "1", "--scenario", "prose-c1", "--small", "--workers", "1", "--duration", "2",
                      "--port", str(free_port()), environment=with_token)
        assert compare.returncode in (0, 4, 5, 6), compare.stdout + compare.stderr  # 4: no usable pair (a busy box)
    assert watcher.samples > 10 and watcher.leaks == {}, watcher.leaks
    assert not any(key in output or token in output for output in outputs)
    written = _files(root / "results", root / "state", REPO / "results", REPO / ".rig", REPO / "docker", REPO / "compose")
    kinds = {path.name for path in written}
    assert {"boot.json", "server.log", "summary.json", "plan.json", "compare.json", "command.txt"} <= kinds, kinds
    leaked = [str(path) for path in written if key.encode() in path.read_bytes() or token.encode() in path.read_bytes()]
    assert leaked == []
    assert {path: path.read_bytes() for path in _files(REPO / "docker", REPO / "compose")} == before
    records = [json.loads(path.read_text()) for path in (root / "results" / "boots").glob("*/boot.json")]
    assert sorted(record["status"] for record in records) == ["failed", "stopped", "stopped", "stopped"], records


def test_loadtest_refuses_a_boot_whose_server_is_gone(rig_dirs):
    """A recorded boot whose process no longer runs (`rig status`: DOWN): loadtest says so in one line
    before any load, instead of a warmup and a run of connection errors (thousands of failed
    requests per run, the client at 99% CPU, exit 4)."""
    env, root = rig_dirs
    victim = _victim()
    victim.kill()
    victim.wait()  # its pid is free: the recorded server is gone
    _stale_state(root, victim.pid, None)
    load = rig_cli("loadtest", "tiny-cpu", "--scenario", "prose-c1", "--small", "--duration", "2", env=env)
    assert load.returncode == 2, load.stdout[-1000:] + load.stderr[-1000:]
    lines = load.stderr.strip().splitlines()
    assert len(lines) == 1 and "is down (" in lines[0] and "rig down tiny-cpu" in lines[0], lines
    assert not list((root / "results").glob("**/records-*.jsonl"))
