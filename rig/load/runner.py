"""`rig loadtest`: runs Locust (one process, or a master and N workers) per scenario against a
booted server, then computes the summary from the raw records the workers wrote."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.boot import base as boot_base
from rig.boot.base import BootRecord
from rig.engines import LENGTH_PINNING
from rig.errors import RigError
from rig.load.metrics import client_lag, client_verdict, summarize
from rig.load.scenarios import LOADTESTS, Scenario, TokenCounter, build_prompts
from rig.recipe import Resolved

LOCUSTFILE = LOADTESTS / "locustfile.py"
SUMMARY_SCHEMA = 1


@dataclass
class LoadTarget:
    """What a run is aimed at: a boot (its id decides warmup) and how to reach it."""

    resolved: Resolved
    record: BootRecord
    model_dir: str | None

    @property
    def boot_id(self) -> str:
        return self.record.boot_id


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_workers() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


def _locust() -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
            "--loglevel", "WARNING", "--stop-timeout", "0"]


def read_records(directory: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(directory.glob("records-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a kill mid-write
    return records


def read_window(directory: Path, scenario: Scenario, records: list[dict[str, Any]]) -> tuple[float, float]:
    events: dict[str, float] = {}
    path = directory / "window.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            event = json.loads(line)
            events.setdefault(event["event"], event["time"])
    starts = [r["t_send"] for r in records] or [time.time()]
    ends = [r["t_end"] for r in records if r.get("t_end")] or [time.time()]
    start = events.get("spawning_complete", min(starts)) + scenario.ramp_s
    end = events.get("stopping", max(ends))
    return start, end


class LocustRun:
    """One scenario run. Processes are started here and always stopped here."""

    def __init__(self, scenario: Scenario, base_url: str, config: dict[str, Any], out_dir: Path, workers: int,
                 remote_workers: int = 0, master_bind: str = "127.0.0.1") -> None:
        self.scenario, self.base_url, self.out_dir = scenario, base_url, out_dir
        self.distributed = (scenario.distributed and scenario.users > 1) or remote_workers > 0
        self.workers = workers if self.distributed else 1
        self.remote_workers, self.master_bind = remote_workers, master_bind
        config_path = out_dir / "config.json"
        config_path.write_text(json.dumps(config, indent=1))
        self.env = {**os.environ, "RIG_LOAD_CONFIG": str(config_path), "PYTHONUNBUFFERED": "1"}
        self.processes: list[subprocess.Popen] = []
        self._seen: dict[Path, tuple[int, int]] = {}

    def run_time_s(self) -> float:
        spawn = self.scenario.users / (self.scenario.spawn_rate or self.scenario.users)
        return spawn + self.scenario.ramp_s + self.scenario.duration_s

    def start(self) -> None:
        run_time = f"{max(1, round(self.run_time_s()))}s"
        common = ["-u", str(self.scenario.users), "-r", str(self.scenario.spawn_rate or self.scenario.users),
                  "-t", run_time, "-H", self.base_url]
        log = open(self.out_dir / "locust.log", "ab")  # noqa: SIM115 - shared by the child processes
        if not self.distributed:
            self.processes.append(subprocess.Popen(_locust() + common, stdout=log, stderr=subprocess.STDOUT, env=self.env))
            return
        port = _free_port()
        master = _locust() + common + ["--master", "--expect-workers", str(self.workers + self.remote_workers),
                                       "--master-bind-host", self.master_bind, "--master-bind-port", str(port)]
        self.processes.append(subprocess.Popen(master, stdout=log, stderr=subprocess.STDOUT, env=self.env))
        if self.remote_workers:
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
            self.processes.append(subprocess.Popen(worker, stdout=log, stderr=subprocess.STDOUT, env=self.env))

    def wait(self, progress: bool = True) -> None:
        deadline = time.monotonic() + self.run_time_s() + 60 + (30 if self.distributed else 0) + 600 * bool(self.remote_workers)
        last = 0.0
        while any(p.poll() is None for p in self.processes):
            if time.monotonic() > deadline:
                self.stop()
                break
            if progress and time.monotonic() - last >= 2:
                last = time.monotonic()
                self._progress()
            time.sleep(0.2)

    def _progress(self) -> None:
        done = 0
        for path in self.out_dir.glob("records-*.jsonl"):  # read only what was appended since the last look
            offset, lines = self._seen.get(path, (0, 0))
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            self._seen[path] = (offset + len(chunk), lines + chunk.count(b"\n"))
            done += self._seen[path][1]
        line = f"{self.scenario.name}: {done} requests done, {self.scenario.users} users, {self.run_time_s():.0f}s planned"
        end = "" if sys.stderr.isatty() else "\n"
        print(("\r" if sys.stderr.isatty() else "") + line, end=end, file=sys.stderr)

    def stop(self) -> None:
        """SIGINT first (Locust writes what it has), then terminate, then kill."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def run_scenario(target: LoadTarget, scenario: Scenario, out_dir: Path, workers: int | None = None,
                 counter: TokenCounter | None = None, warmup: bool = False, progress: bool = True,
                 keep_text: bool = False, prompts: list[dict[str, Any]] | None = None, remote_workers: int = 0,
                 master_bind: str = "127.0.0.1") -> dict[str, Any]:
    if out_dir.exists() and any(out_dir.iterdir()):
        raise RigError(str(out_dir), "(directory)", "already holds a run; records of two runs must never mix",
                       "use a new results directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    record = target.record
    engine = target.resolved.recipe.engine.name
    counter = counter or TokenCounter(target.model_dir, record.base_url, record.served_model)
    prompts = prompts or build_prompts(scenario, counter)
    config = {"scenario": scenario.name, "base_url": record.base_url, "model": record.served_model,
              "endpoint": scenario.endpoint, "max_tokens": scenario.max_tokens, "temperature": scenario.temperature,
              "seed": scenario.seed, "extra_body": LENGTH_PINNING.get(engine, {}), "prompts": prompts,
              "out_dir": str(out_dir), "read_timeout_s": scenario.read_timeout_s,
              "keep_text": keep_text or counter.tokenizer is not None}
    run = LocustRun(scenario, record.base_url, config, out_dir, workers or default_workers(), remote_workers, master_bind)
    interrupted = False
    run.start()
    try:
        run.wait(progress)
    except KeyboardInterrupt:
        interrupted = True
        run.stop()
    records = read_records(out_dir)
    window = read_window(out_dir, scenario, records)
    clients = [client_lag(json.loads(p.read_text()), window) for p in sorted(out_dir.glob("client-*.json"))]
    summary = {
        "schema": SUMMARY_SCHEMA,
        "scenario": {"name": scenario.name, "version": scenario.version, "kind": scenario.kind, "users": scenario.users,
                     "prompt_tokens": scenario.prompt_tokens, "max_tokens": scenario.max_tokens,
                     "duration_s": scenario.duration_s},
        "warmup": warmup,
        "interrupted": interrupted,
        "provenance": provenance(target, run, counter),
        "metrics": summarize(records, window, counter.count if counter.tokenizer is not None else None),
        "client": client_verdict(clients) if run.distributed or scenario.users > 1 else
                  {**client_verdict(clients), "note": "single-process run"},
        "clients": clients,
    }
    from rig.load.report import write_run

    write_run(out_dir, summary)
    return summary


def provenance(target: LoadTarget, run: LocustRun, counter: TokenCounter) -> dict[str, Any]:
    from rig.load.hostfacts import host_facts

    resolved, record = target.resolved, target.record
    recipe = resolved.recipe
    return {
        "recipe": recipe.name, "variant": resolved.variant, "boot_id": record.boot_id, "driver": record.driver,
        "base_url": record.base_url, "served_model": record.served_model,
        "engine": f"{recipe.engine.name} {recipe.engine.version}",
        "image": record.image or {"base": recipe.image.reference(resolved.topology.platform)},
        "adapter_gates": {**resolved.adapter_env(), **{k: v for k, v in record.overlay.items()}},
        "host": host_facts(),
        "client": {"processes": run.workers + (1 if run.distributed else 0), "workers": run.workers,
                   "remote_workers": run.remote_workers,
                   "distributed": run.distributed, "users": run.scenario.users,
                   "spawn_rate": run.scenario.spawn_rate or run.scenario.users, "http_user": "locust HttpUser (requests)",
                   "tokenizer": counter.source},
        "time": time.time(),
    }


def warmup_pending(record: BootRecord) -> bool:
    """The first run after each boot is a warmup; a boot's runs are listed in its boot directory."""
    return not (Path(record.boot_dir) / "runs.jsonl").exists()


def note_run(record: BootRecord, out_dir: Path, warmup: bool) -> None:
    Path(record.boot_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(record.boot_dir) / "runs.jsonl", "a") as handle:
        handle.write(json.dumps({"dir": str(out_dir), "warmup": warmup, "time": time.time()}) + "\n")


def results_root(recipe: str) -> Path:
    return boot_base.RESULTS_DIR / recipe / time.strftime("%Y%m%d-%H%M%S")
