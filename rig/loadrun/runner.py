"""`rig loadtest`: runs Locust (one process, or a master and N workers) per scenario against a
booted server, then computes the summary from the raw records the workers wrote."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rig import paths
from rig.atomic import write_text_atomic
from rig.boot.base import BootPreempted
from rig.boot.record import BootImage, BootRecord
from rig.boot.state import scheduler_ended
from rig.deploy.recipe import Resolved
from rig.engines import LENGTH_PINNING
from rig.errors import RigError
from rig.load.client_error import client_bounds
from rig.load.metrics import (
    arrival_problems,
    arrival_stats,
    arrival_window,
    client_lag,
    client_verdict,
    output_length_stats,
    responsive_end,
    steady_window,
    summarize,
    turn_stats,
)
from rig.load.prompts import TokenCounter, build_prompts
from rig.load.records import RequestRecord, read_records
from rig.load.request_metrics import chunk_token_counts, run_tokens_per_chunk, tokens_read_between
from rig.load.scenarios import ARRIVAL_KINDS, LOADTESTS, Scenario
from rig.load.summary import (
    HEADLINE,
    ClientSetup,
    Metrics,
    Observations,
    Provenance,
    RunSummary,
    ScenarioRun,
    TokenAgreement,
    Window,
)
from rig.load.wire import (
    CONFIG_FILE,
    RIG_PARENT_ENV,
    WINDOW_FILE,
    ArrivalSchedule,
    ClientStats,
    ConversationScript,
    LoadConfig,
    Prompt,
    TraceReplay,
    WindowEvent,
    client_file,
    dispatcher_file,
    read_lines,
)
from rig.load.workload import gamma_schedule
from rig.observe.gpu import GpuSampler, summarize_gpu_samples
from rig.observe.server_metrics import MetricsScraper, ServerMetrics, summarize_server_metrics
from rig.observe.timeline import write_timeline
from rig.redaction import redact_for

LOCUSTFILE = LOADTESTS / "locustfile.py"
# The locustfile's user class for each kind of scenario (closed loops: LLMUser).
USER_CLASS = {"open_loop": "ArrivalUser", "trace": "ArrivalUser", "multi_turn": "ConversationUser"}
EPOCH_LEAD_S = 0.5  # the locustfile starts a schedule this long after spawning completes
SERVER_METRICS = "server-metrics.jsonl"  # raw Prometheus samples, one line per scrape
GPU_SAMPLES = "gpu-samples.jsonl"  # NVML samples of the local GPUs
TIMELINE = "timeline.png"


@dataclass
class LoadTarget:
    """What a run is aimed at: a boot (its id decides warmup), how to reach it, and the recipe it
    runs (None for a server attached by URL without one: then `engine` says what it is)."""

    resolved: Resolved | None
    record: BootRecord
    model_dir: str | None
    engine: str | None = None

    @property
    def engine_name(self) -> str:
        return self.resolved.recipe.engine.name if self.resolved is not None else (self.engine or "transformers")

    @property
    def boot_id(self) -> str:
        return self.record.boot_id


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


KEEP_TEXT_ENV = "RIG_KEEP_TEXT"  # 0: keep no output text (privacy); outputs stay hashed either way
KEEP_TEXT_CHARS = 2000  # enough for the coherence checks (scripts, repetition) and bounded per request


def keep_text_chars() -> int:
    """How much of each output the records keep: the coherence checks read it; `--no-keep-text`
    (RIG_KEEP_TEXT=0) keeps none, and the outputs are then only hashed."""
    return 0 if os.environ.get(KEEP_TEXT_ENV, "1").strip() in ("0", "no", "false", "off") else KEEP_TEXT_CHARS


def default_workers() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


def _locust() -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
            "--loglevel", "WARNING", "--stop-timeout", "0"]


def read_window_events(directory: Path) -> dict[str, float]:
    """Locust's own moments (spawning_complete, stopping), as the locustfile wrote them: the first
    of each."""
    events: dict[str, float] = {}
    for event in read_lines(directory / WINDOW_FILE, WindowEvent):
        events.setdefault(event.event, event.time)
    return events


def read_clients(directory: Path) -> list[ClientStats]:
    """Each Locust process's raw samples; a file cut by a kill mid-write counts one process fewer."""
    clients = []
    for path in sorted(directory.glob(client_file("*"))):
        client = ClientStats.parse_line(path.read_bytes(), str(path))
        if client is not None:
            clients.append(client)
    return clients


def read_dispatcher(directory: Path) -> ClientStats | None:
    """The Locust master's samples, in a distributed run (None: one process, or a run before they were written)."""
    path = next(iter(sorted(directory.glob(dispatcher_file("*")))), None)
    return None if path is None else ClientStats.parse_line(path.read_bytes(), str(path))


STOP_GRACE_S = 30.0  # Locust's shutdown at 3000 users: its users stop, then the records and statistics are written
WATCH_S = 2.0  # how often a run asks the scheduler whether it ended the boot's job


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
        if scenario.kind in ARRIVAL_KINDS:
            drain = (scenario.arrivals or scenario.trace).drain_s  # type: ignore[union-attr]
            return spawn + EPOCH_LEAD_S + self.schedule_s + drain
        return spawn + max(scenario.ramp_s, self.settle_s) + scenario.duration_s  # the settle time includes the ramp

    def start(self) -> None:
        run_time = f"{max(1, math.ceil(self.run_time_s() - 1e-9))}s"  # Locust takes whole seconds: never less than planned
        common = ["-u", str(self.scenario.pool), "-r", str(self.scenario.spawn_rate or self.scenario.pool),
                  "-t", run_time, "-H", self.base_url, USER_CLASS.get(self.scenario.kind, "LLMUser")]
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

    def _progress(self) -> None:
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
        end = "" if sys.stderr.isatty() else "\n"
        print(("\r" if sys.stderr.isatty() else "") + line, end=end, file=sys.stderr)

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


@dataclass
class Workload:
    """The kind-specific part of the Locust configuration, the arrival schedule (offsets in seconds
    from its start) of an arrival-driven run (empty for the others) and its normalisation factor."""

    arrivals: ArrivalSchedule | None = None
    trace: TraceReplay | None = None
    conversations: list[ConversationScript] | None = None
    turns: int | None = None
    think_time_s: float = 0.0
    offsets: list[float] = field(default_factory=list)
    factor: float = 1.0


def workload_config(scenario: Scenario, counter: TokenCounter, label: str) -> Workload:
    workload = Workload()
    if scenario.arrivals is not None:
        arrivals = scenario.arrivals
        count = arrivals.requests or max(1, round(arrivals.rate * scenario.duration_s))
        workload.arrivals = ArrivalSchedule(rate=arrivals.rate, burstiness=arrivals.burstiness, count=count, seed=scenario.seed)
        workload.offsets, workload.factor = gamma_schedule(arrivals.rate, arrivals.burstiness, count, scenario.seed)
    if scenario.trace is not None:
        from rig.load.prompts import build_trace

        workload.trace = build_trace(scenario, counter, label, scenario.file)
        workload.offsets = [row.at for row in workload.trace.rows]
        workload.arrivals = ArrivalSchedule(offsets=workload.offsets)
    if scenario.conversation is not None:
        from rig.load.prompts import build_conversations

        workload.conversations = build_conversations(scenario, counter, scenario.file)
        workload.turns, workload.think_time_s = scenario.conversation.turns, scenario.conversation.think_time_s
    return workload


def run_scenario(target: LoadTarget, scenario: Scenario, out_dir: Path, workers: int | None = None,
                 counter: TokenCounter | None = None, warmup: bool = False, progress: bool = True,
                 prompts: list[Prompt] | None = None, remote_workers: int = 0,
                 master_bind: str = "127.0.0.1", settle_s: float = 0.0, slurm_workers: bool = False) -> RunSummary:
    if out_dir.exists() and any(out_dir.iterdir()):
        raise RigError(str(out_dir), "(directory)", "already holds a run; records of two runs must never mix",
                       "use a new results directory")
    record = target.record
    engine = target.engine_name
    counter = counter or TokenCounter(target.model_dir, record.base_url, record.served_model)
    # Same label in the same round of every boot: the nonce sequence (and a trace's block tags) repeat across arms.
    label = f"{scenario.seed}/{out_dir.parent.name}/{out_dir.name}"
    run = LocustRun(scenario, record.base_url, out_dir, workers or default_workers(), remote_workers, master_bind, settle_s,
                    slurm_workers)
    if scenario.kind in ARRIVAL_KINDS and run.processes_sending > scenario.pool:
        raise RigError(f"loadtests/scenarios/{scenario.name}.yaml", "users", f"{scenario.pool} user(s) for {run.processes_sending} "
                       "Locust processes: each process sends its share of the arrivals and needs a user to send them",
                       f"raise users to at least {run.processes_sending}, or run fewer --workers")
    nonce = None
    if prompts is None:
        prompts, nonce = build_prompts(scenario, counter)
    workload = workload_config(scenario, counter, label)
    offsets = workload.offsets
    out_dir.mkdir(parents=True, exist_ok=True)
    config = LoadConfig(scenario=scenario.name, kind=scenario.kind, base_url=record.base_url, model=record.served_model,
                        endpoint=scenario.endpoint, max_tokens=scenario.max_tokens, temperature=scenario.temperature,
                        seed=scenario.seed, extra_body=dict(LENGTH_PINNING.get(engine, {})), prompts=prompts,
                        nonce=nonce, nonce_seed=label, out_dir=str(out_dir), read_timeout_s=scenario.read_timeout_s,
                        keep_text_chars=keep_text_chars(), arrival_processes=run.processes_sending,
                        output_lengths=scenario.output_lengths, arrivals=workload.arrivals, trace=workload.trace,
                        conversations=workload.conversations, turns=workload.turns, think_time_s=workload.think_time_s,
                        spawn_rate=scenario.spawn_rate or scenario.pool)
    run.configure(config, offsets[-1] if offsets else 0.0)
    interrupted = False
    local = urllib.parse.urlsplit(record.base_url).hostname in ("127.0.0.1", "localhost", "::1")
    with contextlib.ExitStack() as held:  # after an interrupt, further ones wait until the run is written up
        # Server metrics and GPU telemetry are sampled beside the load, into this run's directory.
        with MetricsScraper(record.base_url, out_dir / SERVER_METRICS, 1.0, os.environ.get("RIG_API_KEY")), \
                GpuSampler(out_dir / GPU_SAMPLES, 0.25) if local else contextlib.nullcontext():
            try:
                run.start()
                run.wait(progress, lambda: scheduler_ended(record))
            except KeyboardInterrupt:
                interrupted = True
                held.enter_context(interrupts_held())
            finally:
                run.stop()  # every Locust process this run started is gone before anything is read
        records = read_records(out_dir)
        raw_clients = read_clients(out_dir)
        events = read_window_events(out_dir)
        if "stopping" in events:
            events["stopping"] = responsive_end(raw_clients, events["stopping"])
        if scenario.kind in ARRIVAL_KINDS:
            window = arrival_window(records, events, offsets[-1], scenario.ramp_s, replay=scenario.kind == "trace")
        else:
            window = steady_window(records, events, scenario.ramp_s, scenario.pool)
        clients = [client_lag(client, window) for client in raw_clients]
        metrics = summarize(records, window, counter.count if counter.tokenizer is not None else None)
        metrics.output_lengths = output_length_stats(records, window)
        bounds = client_bounds(records, window, raw_clients, scenario.client_error_limit, read_dispatcher(out_dir), workload.think_time_s)
        verdict = client_verdict(clients, bounds, HEADLINE[scenario.kind].name)
        if scenario.kind in ARRIVAL_KINDS:
            arrivals = scenario.arrivals
            metrics.arrivals = arrival_stats(records, window, offsets, events.get("arrivals_start"),
                                             arrivals.rate if arrivals else None, arrivals.burstiness if arrivals else None,
                                             scenario.capped, scenario.pool, workload.factor)
            late = arrival_problems(metrics.arrivals)
            verdict.valid, verdict.reasons = bool(verdict.valid) and not late, verdict.reasons + late
            verdict.every_figure += late
        if scenario.kind == "multi_turn":
            metrics.conversation = turn_stats(records, window)
        summary = RunSummary(
            scenario=ScenarioRun.of(scenario, settle_s, nonce is not None or scenario.kind == "trace", workload.trace),
            warmup=warmup, interrupted=interrupted or run.ended is not None, provenance=provenance(target, run, counter),
            metrics=metrics, client=verdict, clients=clients,
            observations=observe(out_dir, records, window, metrics, timeline_title(scenario.name, record.ref, record.boot_id),
                                 target.resolved.topology.gpu_ids if target.resolved is not None else None),
        )
        from rig.load.report import write_run

        write_run(out_dir, summary)
    if run.ended is not None:  # written up as far as it ran; the boot, not the run, is what failed
        raise BootPreempted(f"{record.ref}: the scheduler ended boot {record.boot_id} during {scenario.name}: {run.ended}; "
                            f"the run stopped (what it measured: {out_dir})")
    return summary


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """After a Ctrl-C (or SIGTERM, SIGHUP), further ones wait until the run is written up: a second
    Ctrl-C while Locust stopped or the summary was computed lost the whole summary (the records
    were kept, and nothing said the run had no summary)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.getsignal(signum) for signum in signals}
    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:  # respect nohup
            signal.signal(signum, lambda number, frame: None)
    print("rig: stopping; writing up what the run measured (a further interrupt waits for it)", file=sys.stderr)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def observe(out_dir: Path, records: list[RequestRecord], window: Window, metrics: Metrics, title: str,
            serving_gpus: list[int] | None = None) -> Observations:
    """What the server and the GPUs did inside the window, and the run's timeline picture."""
    server = summarize_server_metrics(out_dir / SERVER_METRICS, (window.start, window.end))
    observations = Observations(server=server, output_tokens=token_agreement(server, records))
    if (out_dir / GPU_SAMPLES).exists():
        tokens = metrics.output_tok_s * window.seconds
        observations.gpu = summarize_gpu_samples(out_dir / GPU_SAMPLES, (window.start, window.end), tokens, serving_gpus)
    picture = draw_timeline(out_dir, records, window, title)
    observations.timeline = picture.name if picture else None
    return observations


def token_agreement(server: ServerMetrics, records: list[RequestRecord]) -> TokenAgreement | None:
    """The client's output tokens read between the server's first and last scrape inside the window,
    beside the increase of the server's generation-token counter over the same scrapes."""
    generated = server.metrics.get("generation_tokens_per_s")
    if server.span is None or generated is None or generated.increase is None or generated.increase <= 0:
        return None
    first, last = server.span
    client = tokens_read_between(records, first, last, run_tokens_per_chunk(records))
    return TokenAgreement(seconds=last - first, client_tokens=client, server_tokens=generated.increase,
                          difference=client / generated.increase - 1)


def timeline_title(scenario: str, ref: str, boot_id: str | None) -> str:
    return f"{scenario} on {ref} (boot {boot_id})"


def draw_timeline(out_dir: Path, records: list[RequestRecord], window: Window, title: str) -> Path | None:
    """The run's timeline picture (client tokens, the server's queues and KV use, the GPUs' clocks
    and power over the run, the window marked), from what the run wrote: redrawn from the same
    files by benchmarks/redraw_timelines.py, so archives of raw results need not keep the PNGs."""
    ratio = run_tokens_per_chunk(records)
    events = [(t, n) for r in records for t, n in zip(r.chunks, chunk_token_counts(r, ratio))]
    return write_timeline(out_dir / TIMELINE, events, out_dir / SERVER_METRICS,
                          out_dir / GPU_SAMPLES if (out_dir / GPU_SAMPLES).exists() else None, (window.start, window.end), title)


def provenance(target: LoadTarget, run: LocustRun, counter: TokenCounter) -> Provenance:
    from rig.load.hostfacts import host_facts

    resolved, record = target.resolved, target.record
    engine, image = target.engine_name, record.image
    gates = redact_for(resolved, record.overlay) if resolved else {}
    if resolved is not None:
        recipe = resolved.recipe
        engine = f"{recipe.engine.name} {recipe.engine.version}"
        if image == BootImage() and recipe.image:  # a native boot runs the recipe's base, not an image of its own
            image = BootImage(base=recipe.image.reference(resolved.topology.platform))
        gates = redact_for(resolved, {**resolved.adapter_env(), **record.overlay})
    return Provenance(
        recipe=record.recipe, variant=record.variant, engine=engine, image=image, adapter_gates=dict(gates),
        boot_id=record.boot_id, driver=record.driver, base_url=record.base_url, served_model=record.served_model,
        host=host_facts(),
        client=ClientSetup(processes=run.workers + (1 if run.distributed else 0), workers=run.workers,
                           remote_workers=run.remote_workers, distributed=run.distributed, users=run.scenario.pool,
                           user_class=USER_CLASS.get(run.scenario.kind, "LLMUser"),
                           spawn_rate=run.scenario.spawn_rate or run.scenario.pool, http_user="locust HttpUser (requests)",
                           tokenizer=counter.source),
        time=time.time(),
    )


def results_root(recipe: str) -> Path:
    return paths.results_dir() / recipe / time.strftime("%Y%m%d-%H%M%S")
