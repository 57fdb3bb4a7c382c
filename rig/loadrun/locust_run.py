"""One scenario's Locust processes (one process, or a master and N workers, local, remote or on
Slurm): started with the run's configuration, watched until the run ends, and always stopped here."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from rig.atomic import write_text_atomic
from rig.load.kinds import KINDS
from rig.load.scenarios import LOADTESTS, Scenario
from rig.load.wire import CONFIG_FILE, RIG_PARENT_ENV, LoadConfig

LOCUSTFILE = LOADTESTS / "locustfile.py"
# The locustfile's user class for each kind of scenario (closed loops: LLMUser).
EPOCH_LEAD_S = 0.5  # the locustfile starts a schedule this long after spawning completes
STOP_GRACE_S = 30.0  # Locust's shutdown at 3000 users: its users stop, then the records and statistics are written
LOGGED_EVERY_S = 30.0  # how often the progress line is printed where stderr is not a terminal (a log)
WATCH_S = 2.0  # how often a run asks the scheduler whether it ended the boot's job


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_workers() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


def _locust() -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
            "--loglevel", "WARNING", "--stop-timeout", "0"]


class LocustRun:
    """One scenario run. Processes are started here and always stopped here."""

    def __init__(self, scenario: Scenario, base_url: str, out_dir: Path, workers: int,
                 remote_workers: int = 0, master_bind: str = "127.0.0.1", settle_s: float = 0.0,
                 slurm_workers: bool = False) -> None:
        self.scenario, self.base_url, self.out_dir = scenario, base_url, out_dir
        self.slurm_workers, self.slurm_job_name = slurm_workers, None  # remote workers started as a Slurm job
        self.settle_s = settle_s
        self.distributed = (scenario.distributed and scenario.pool > 1) or remote_workers > 0
        self.workers = workers if self.distributed else 1
        self.remote_workers, self.master_bind = remote_workers, master_bind
        self.schedule_s = 0.0  # arrival-driven runs: the schedule's length (set by configure)
        self.env = {**os.environ, "RIG_LOAD_CONFIG": str(out_dir / CONFIG_FILE), "PYTHONUNBUFFERED": "1",
                    RIG_PARENT_ENV: str(os.getpid())}
        self.processes: list[subprocess.Popen] = []
        self._seen: dict[Path, tuple[int, int]] = {}
        self._logged_at = float("-inf")  # the last progress line printed to a log (LOGGED_EVERY_S)
        self.ended: str | None = None  # why the run stopped early: the scheduler ended the boot's job

    @property
    def processes_sending(self) -> int:
        """Locust processes that run users (each takes its share of an arrival schedule)."""
        return self.workers + self.remote_workers if self.distributed else 1

    def configure(self, config: LoadConfig, schedule_s: float = 0.0) -> None:
        self.schedule_s = schedule_s
        write_text_atomic(self.out_dir / CONFIG_FILE, config.json_text())

    def run_time_s(self) -> float:
        """Closed loops: spawning, the ramp, the time to a steady state (every user's first token
        plus one request lifetime, estimated from this boot's warmup of the scenario), then the
        measured duration. Arrival-driven runs: spawning, the schedule, then its drain (the run
        ends earlier, as soon as the last request is done)."""
        scenario = self.scenario
        spawn = scenario.pool / (scenario.spawn_rate or scenario.pool)
        if KINDS[scenario.kind].arrival_driven:
            drain = (scenario.arrivals or scenario.trace).drain_s  # type: ignore[union-attr]
            return spawn + EPOCH_LEAD_S + self.schedule_s + drain
        return spawn + max(scenario.ramp_s, self.settle_s) + scenario.duration_s  # the settle time includes the ramp

    def start(self) -> None:
        run_time = f"{max(1, math.ceil(self.run_time_s() - 1e-9))}s"  # Locust takes whole seconds: never less than planned
        common = ["-u", str(self.scenario.pool), "-r", str(self.scenario.spawn_rate or self.scenario.pool),
                  "-t", run_time, "-H", self.base_url, KINDS[self.scenario.kind].user_class]
        log = open(self.out_dir / "locust.log", "ab")  # noqa: SIM115 - shared by the child processes
        if not self.distributed:
            self._spawn(_locust() + common, log)
            return
        port = _free_port()
        master = _locust() + common + ["--master", "--expect-workers", str(self.workers + self.remote_workers),
                                       "--master-bind-host", self.master_bind, "--master-bind-port", str(port)]
        self._spawn(master, log)
        if self.remote_workers and self.slurm_workers:
            from rig.loadrun import slurm_workers

            process, self.slurm_job_name = slurm_workers.start(self.remote_workers, _locust(), self.master_bind, port,
                                                               self.out_dir, self.env, log)
            self.processes.append(process)
        elif self.remote_workers:
            # The same worker code runs on other client machines; their records come back through
            # Locust's worker reports because this run's directory is not on those machines.
            self.remote_command = (f"RIG_LOAD_CONFIG=<copy of {self.out_dir / 'config.json'}> python -m locust -f loadtests/locustfile.py "
                                   f"--worker --master-host <this host> --master-port {port}")
            (self.out_dir / "remote-worker.txt").write_text(self.remote_command + "\n")
            print(f"waiting for {self.remote_workers} remote worker(s); on each client machine run:\n  {self.remote_command}",
                  file=sys.stderr)
        self.port = port
        for _ in range(self.workers):
            worker = _locust() + ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
            self._spawn(worker, log)

    def _spawn(self, argv: list[str], log: IO[bytes]) -> None:
        """One Locust process, in a session of its own: rig alone stops it (stop), never a terminal's Ctrl-C."""
        self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True))

    def wait(self, progress: bool = True, ended: Callable[[], str | None] | None = None) -> None:
        """Until Locust ends the run. `ended` (asked every WATCH_S) says why the server's nodes
        were taken away: the run stops then, as every request after it would only fail."""
        deadline = time.monotonic() + self.run_time_s() + 60 + (30 if self.distributed else 0) + 600 * bool(self.remote_workers)
        last = watched = 0.0
        while any(p.poll() is None for p in self.processes):
            if time.monotonic() > deadline:
                self.stop()
                break
            if ended is not None and time.monotonic() - watched >= WATCH_S:
                watched = time.monotonic()
                self.ended = ended()
                if self.ended is not None:
                    break
            if progress and time.monotonic() - last >= 2:
                last = time.monotonic()
                self._progress()
            time.sleep(0.2)
        if progress:  # the count at the end, in a log too (its last line would otherwise be an early one)
            self._progress(final=True)

    def _progress(self, final: bool = False) -> None:
        done = 0
        for path in self.out_dir.glob("records-*.jsonl"):  # read only what was appended since the last look
            offset, lines = self._seen.get(path, (0, 0))
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            self._seen[path] = (offset + len(chunk), lines + chunk.count(b"\n"))
            done += self._seen[path][1]
        line = (f"{self.scenario.name}: {done} requests done, {self.scenario.pool} users, {self.run_time_s():.0f}s planned "
                f"(at least {self.scenario.duration_s:g}s measured, from the steady state on)")
        if final:  # on a terminal, over the whole line rewritten in place
            ended = f"{self.scenario.name}: {done} requests done, {self.scenario.pool} users: the load has ended"
            print("\r" + ended.ljust(len(line)) if sys.stderr.isatty() else ended, file=sys.stderr)
        elif sys.stderr.isatty():  # one line, rewritten in place
            print("\r" + line, end="", file=sys.stderr)
        elif time.monotonic() - self._logged_at >= LOGGED_EVERY_S:  # a log file: a line now and then, not a flood
            self._logged_at = time.monotonic()
            print(line, file=sys.stderr)

    def stop(self) -> None:
        """SIGTERM (Locust's own shutdown: its quitting handlers write what the run has), then kill.
        Locust's processes run in sessions of their own, so a Ctrl-C at the terminal reaches rig
        alone and rig stops them this way: a SIGINT raised KeyboardInterrupt wherever a greenlet
        was, which gevent at times printed and ignored (the run went on to its end, 10 s later),
        and a second one cut the quitting handler's writes (the client statistics lost)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.slurm_job_name is not None:
            from rig.loadrun import slurm_workers

            slurm_workers.stop(self.slurm_job_name)
