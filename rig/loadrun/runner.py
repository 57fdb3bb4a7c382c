"""`rig loadtest`: runs Locust (one process, or a master and N workers) per scenario against a
booted server, then computes the summary from the raw records the workers wrote.

The Locust processes are rig/loadrun/locust_run.py's; what their files and the server's telemetry
yield once they are gone is rig/loadrun/writeup.py's. Here: a run's configuration, its steady
window, its figures and client verdict, and its provenance."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rig import paths
from rig.boot.base import BootPreempted
from rig.boot.record import BootImage, BootRecord
from rig.boot.state import scheduler_ended
from rig.deploy.recipe import Resolved
from rig.engines import LENGTH_PINNING
from rig.errors import RigError
from rig.load.arrivals import arrival_problems, arrival_stats, arrival_window
from rig.load.client_error import client_bounds
from rig.load.figures import HEADLINE
from rig.load.kinds import KINDS
from rig.load.metrics import (
    client_lag,
    client_verdict,
    output_length_stats,
    responsive_end,
    steady_window,
    summarize,
    turn_stats,
)
from rig.load.prompts import TokenCounter, build_prompts
from rig.load.provenance import ClientSetup, Provenance, ScenarioRun
from rig.load.records import read_records
from rig.load.scenarios import Scenario
from rig.load.summary import RunSummary
from rig.load.wire import ArrivalSchedule, ConversationScript, LoadConfig, Prompt, TraceReplay
from rig.load.workload import gamma_schedule
from rig.loadrun.locust_run import LocustRun, default_workers
from rig.loadrun.writeup import (
    GPU_SAMPLES,
    SERVER_METRICS,
    observe,
    read_clients,
    read_dispatcher,
    read_window_events,
    timeline_title,
)
from rig.observe.gpu import GpuSampler
from rig.observe.server_metrics import MetricsScraper
from rig.redaction import redact_for


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


KEEP_TEXT_ENV = "RIG_KEEP_TEXT"  # 0: keep no output text (privacy); outputs stay hashed either way
KEEP_TEXT_CHARS = 2000  # enough for the coherence checks (scripts, repetition) and bounded per request


def keep_text_chars() -> int:
    """How much of each output the records keep: the coherence checks read it; `--no-keep-text`
    (RIG_KEEP_TEXT=0) keeps none, and the outputs are then only hashed."""
    return 0 if os.environ.get(KEEP_TEXT_ENV, "1").strip() in ("0", "no", "false", "off") else KEEP_TEXT_CHARS


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
    if KINDS[scenario.kind].arrival_driven and run.processes_sending > scenario.pool:
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
        if KINDS[scenario.kind].arrival_driven:
            window = arrival_window(records, events, offsets[-1], scenario.ramp_s, replay=KINDS[scenario.kind].replays)
        else:
            window = steady_window(records, events, scenario.ramp_s, scenario.pool)
        clients = [client_lag(client, window) for client in raw_clients]
        metrics = summarize(records, window, counter.count if counter.tokenizer is not None else None)
        metrics.output_lengths = output_length_stats(records, window)
        bounds = client_bounds(records, window, raw_clients, scenario.client_error_limit, read_dispatcher(out_dir), workload.think_time_s)
        verdict = client_verdict(clients, bounds, HEADLINE[scenario.kind].name)
        if KINDS[scenario.kind].arrival_driven:
            arrivals = scenario.arrivals
            metrics.arrivals = arrival_stats(records, window, offsets, events.get("arrivals_start"),
                                             arrivals.rate if arrivals else None, arrivals.burstiness if arrivals else None,
                                             scenario.capped, scenario.pool, workload.factor)
            late = arrival_problems(metrics.arrivals)
            verdict.valid, verdict.reasons = bool(verdict.valid) and not late, verdict.reasons + late
            verdict.every_figure += late
        if KINDS[scenario.kind].conversations:
            metrics.conversation = turn_stats(records, window)
        summary = RunSummary(
            scenario=ScenarioRun.of(scenario, settle_s, nonce is not None or KINDS[scenario.kind].replays, workload.trace),
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
                           user_class=KINDS[run.scenario.kind].user_class,
                           spawn_rate=run.scenario.spawn_rate or run.scenario.pool, http_user="locust HttpUser (requests)",
                           tokenizer=counter.source),
        time=time.time(),
    )


def results_root(recipe: str) -> Path:
    return paths.results_dir() / recipe / time.strftime("%Y%m%d-%H%M%S")
