"""tiny-cpu as a Slurm job on a real cluster (`make slurm-lab`): up, status, logs, a Locust load
test and down through the CLI, and a job Slurm ends mid-boot as a failed boot with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, free_port, measured, rig_cli
from slurm_lab import engine_processes, queue, slurm_cluster  # noqa: F401 - slurm_cluster is a fixture

from rig.exits import Exit

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state")}


def test_up_status_logs_loadtest_down_as_a_slurm_job(tmp_path):
    env, port = _env(tmp_path), str(free_port())
    up = rig_cli("up", "tiny-cpu", "--driver", "slurm", "--port", port, env=env, timeout=300)
    assert up.returncode == 0, up.stderr[-2000:]
    state = json.loads(Path(env["RIG_STATE_DIR"], "tiny-cpu.json").read_text())
    job, nodes = state["slurm_job"], state["slurm_nodes"]
    try:
        assert state["driver"] == "slurm" and job and nodes and state["status"] == "healthy"
        assert [line.split()[0] for line in queue(f"rig-{state['boot_id']}")] == [job]
        status = rig_cli("status", env=env)
        assert status.returncode == 0 and "slurm" in status.stdout and " up " in status.stdout, status.stdout
        logs = rig_cli("logs", "tiny-cpu", env=env)
        assert logs.returncode == 0 and "GET /health" in logs.stdout, logs.stdout[-1000:]
        # every node's fingerprint, the head's as the boot's, with the job's node list
        assert state["fingerprint"]["slurm_nodes"] == ",".join(nodes) and [n["hostname"] for n in state["fingerprint"]["nodes"]] == nodes
        loadtest = rig_cli("loadtest", "tiny-cpu", "--scenario", "prose-c1", "--small", "--workers", "1", "--duration", "3",
                           env=env, timeout=300)
        assert measured(loadtest), loadtest.stdout[-2000:] + loadtest.stderr[-2000:]
    finally:
        down = rig_cli("down", "tiny-cpu", env=env)
    assert down.returncode == 0, down.stderr
    assert not queue(f"rig-{state['boot_id']}"), "the job is still in squeue after rig down"
    saved = json.loads(Path(state["boot_dir"], "boot.json").read_text())
    assert saved["status"] == "stopped" and saved["slurm_end"] is None


def _job_of(state_file: Path, timeout_s: float = 120) -> str | None:
    """The Slurm job a boot recorded, as soon as it has one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            job = json.loads(state_file.read_text()).get("slurm_job")
        except (OSError, ValueError):
            job = None
        if job:
            return job
        time.sleep(0.1)
    return None


def _end_time(job: str) -> float:
    """When Slurm ended the job (scontrol's EndTime, local time), as a Unix time."""
    shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, check=True, timeout=30)
    fields = dict(part.split("=", 1) for part in shown.stdout.split() if "=" in part)
    return time.mktime(time.strptime(fields["EndTime"], "%Y-%m-%dT%H:%M:%S"))


def test_a_time_limit_mid_load_and_a_cancel_mid_boot_are_failed_boots_with_slurms_reason(tmp_path):
    """Two ways Slurm ends a job, side by side (the time limit takes its minute meanwhile). A
    1-minute limit (RIG_SLURM_TIME) reached under `rig loadtest`: the run stops within seconds of
    the job's end, not at the end of the 600 s it was asked for, and fails naming TIMEOUT. An outside
    scancel while `rig up` waits for health: a failed boot naming CANCELLED. Each boot record is a
    failed boot with Slurm's state, and nothing is left in squeue or on any node."""
    timed, timed_port = _env(tmp_path / "timed"), free_port()
    # The delay variant: its server sleeps 5 ms a step, so the minute of load costs the box less CPU.
    up = rig_cli("up", "tiny-cpu:delay", "--driver", "slurm", "--port", str(timed_port), env={**timed, "RIG_SLURM_TIME": "1"},
                 timeout=300)
    assert up.returncode == 0, up.stderr[-2000:]
    timed_job = _job_of(Path(timed["RIG_STATE_DIR"], "tiny-cpu.json"))
    load = subprocess.Popen([sys.executable, "-m", "rig", "loadtest", "tiny-cpu", "--scenario", "prose-c1", "--small",
                             "--workers", "1", "--duration", "600"], cwd=REPO, env={**os.environ, **timed},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    env, port = _env(tmp_path / "cancelled"), free_port()
    process = subprocess.Popen([sys.executable, "-m", "rig", "up", "tiny-cpu", "--driver", "slurm", "--port", str(port)],
                               cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state_file = Path(env["RIG_STATE_DIR"], "tiny-cpu.json")
    job = _job_of(state_file)
    assert job is not None, "the boot recorded no Slurm job"
    subprocess.run(["scancel", job], check=True, timeout=30)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == Exit.FAILED, stderr
    boot_dir = max(Path(env["RIG_RESULTS_DIR"], "boots").iterdir())
    saved = json.loads((boot_dir / "boot.json").read_text())
    assert saved["status"] == "failed" and saved["slurm_job"] == job
    assert saved["slurm_end"].startswith("Slurm job state CANCELLED"), saved
    assert not state_file.exists() and not queue(f"rig-{saved['boot_id']}") and not engine_processes(port)

    _, stderr = load.communicate(timeout=300)
    stopped = time.time()
    assert load.returncode == Exit.FAILED and "Slurm job state TIMEOUT" in stderr, stderr[-2000:]
    # the limit's end (slurmctld checks limits every 30 s), then KillWait, then the run's next look at the job
    assert stopped - _end_time(timed_job) < 20, (stopped, _end_time(timed_job))
    assert "TIMEOUT" in rig_cli("status", env=timed).stdout
    down = rig_cli("down", "tiny-cpu", env=timed)
    assert down.returncode == 0, down.stderr
    boot_dir = max(Path(timed["RIG_RESULTS_DIR"], "boots").iterdir())
    saved = json.loads((boot_dir / "boot.json").read_text())
    assert saved["status"] == "failed" and saved["slurm_end"].startswith("Slurm job state TIMEOUT"), saved
    assert not queue(f"rig-{saved['boot_id']}") and not engine_processes(timed_port)


def test_locust_workers_start_as_a_slurm_job_on_client_nodes(tmp_path):
    """c3000 at small sizes with two workers as a job on n1 and n2: the run waits for them, their
    records come back through Locust's worker reports, and their job is gone afterwards."""
    env = _env(tmp_path)
    loadtest = rig_cli("loadtest", "tiny-cpu", "--scenario", "c3000", "--small", "--workers", "1", "--slurm-workers", "2",
                       "--duration", "3", "--port", str(free_port()), env=env, timeout=400)
    assert measured(loadtest), loadtest.stdout[-2000:] + loadtest.stderr[-2000:]
    summaries = [json.loads(p.read_text()) for p in Path(env["RIG_RESULTS_DIR"]).rglob("c3000/summary.json")]
    assert summaries, list(Path(env["RIG_RESULTS_DIR"]).rglob("*"))[:20]
    client = summaries[0]["provenance"]["client"]
    assert client["remote_workers"] == 2 and client["distributed"] is True, client
    assert summaries[0]["metrics"]["requests"]["total"] > 0
    assert not queue("rig-load-")
