"""A load run asks, while Locust runs, whether the scheduler ended the boot's job (a time limit, a
node failure, a cancel from outside): it stops then, with the scheduler's reason, instead of
sending requests that can only fail until its planned end. The Slurm lab tests end real jobs."""

from __future__ import annotations

import subprocess
import sys

from rig.load.scenarios import load_scenario
from rig.loadrun.locust_run import LocustRun


def test_a_run_stops_at_the_first_look_that_finds_its_job_ended(tmp_path):
    run = LocustRun(load_scenario("prose-c1"), "http://127.0.0.1:9", tmp_path, workers=1)
    # a process that would outlive any test: the run ends only because its job did
    run.processes.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
    looks = iter([None, None, "Slurm job state NODE_FAIL (NodeDown)"])
    try:
        run.wait(progress=False, ended=lambda: next(looks))
        assert run.ended == "Slurm job state NODE_FAIL (NodeDown)"
        assert run.processes[0].poll() is None  # left for run.stop(), which run_scenario always calls
    finally:
        run.stop()
    assert run.processes[0].poll() is not None


def test_a_run_without_a_scheduler_is_never_stopped_by_the_watch(tmp_path):
    run = LocustRun(load_scenario("prose-c1"), "http://127.0.0.1:9", tmp_path, workers=1)
    run.processes.append(subprocess.Popen([sys.executable, "-c", "pass"]))
    run.wait(progress=False, ended=lambda: None)
    assert run.ended is None and run.processes[0].returncode == 0
