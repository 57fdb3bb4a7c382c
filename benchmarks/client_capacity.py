"""Client capacity: how many token events per second rig's Locust client delivers per CPU core, how
far its timing could move each figure, and how close its figures are to a streaming server whose
timing is known exactly; with --aiperf, AIPerf on the same server, load and host, in the same run.

    python benchmarks/client_capacity.py --users 3000 --workers 10 --server-processes 5 --duration 30
    python benchmarks/client_capacity.py --users 1000 --workers 1 --step 0.25 --max-num-seqs 2048   # engine-like bursts
    python benchmarks/client_capacity.py --users 300 --workers 1 --aiperf /path/to/venv/bin/aiperf --tokenizer DIR
    python benchmarks/client_capacity.py --users 300 --workers 1 --profile            # where the time goes
    python benchmarks/client_capacity.py --users 300 --locustfile OLD.py              # another version, same load
    python benchmarks/client_capacity.py --analyse /tmp/capacity/3000                 # the figures again, from its files

Each stream sends a token every --itl seconds (with --step: every running stream one chunk per
step, at most --max-num-seqs running per server process, the rest queued), so the offered event
rate and the true ITL are known. The run reports delivered / offered, events per second per
process, events per CPU-second of the client's processes (its cost per event), ITL p50 and decode
rate against the truth, and rig's client bound on each (rig.load.client_error); a run is valid
when at least 99% of offered events arrived and the headline's bound holds. With --profile each
worker runs cProfile over the window. Prints figures; asserts nothing (speed targets are read, on
a machine whose cores are free: the timed server shares them)."""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "adapter"))

from rig.atomic import write_text_atomic  # noqa: E402
from rig.boot.base import BootRecord  # noqa: E402
from rig.deploy.recipe import load  # noqa: E402
from rig.load.client_error import client_bounds  # noqa: E402
from rig.load.metrics import client_verdict  # noqa: E402
from rig.load.prompts import FixedPrompts  # noqa: E402
from rig.load.records import RequestRecord, read_records  # noqa: E402
from rig.load.scenarios import Scenario  # noqa: E402
from rig.load.summary import HEADLINE, RunSummary, Window  # noqa: E402
from rig.load.wire import Prompt  # noqa: E402
from rig.loadrun import locust_run  # noqa: E402
from rig.loadrun.runner import LoadTarget, run_scenario  # noqa: E402
from rig.loadrun.writeup import read_clients, read_dispatcher  # noqa: E402
from rig.testing import step_engine, timed_server  # noqa: E402

ARGS_FILE = "capacity-args.json"  # the load's options, written before it runs (--analyse reads them)
AIPERF_CPU_FILE = "aiperf-cpu.json"  # AIPerf's process tree's CPU, sampled while it ran


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=10, help="Locust worker processes (1: one process, no master)")
    parser.add_argument("--server-processes", type=int, default=5)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--itl", type=float, default=0.05, help="seconds between tokens of one stream (0.05 = 20 tok/s)")
    parser.add_argument("--ttft", type=float, default=0.1)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--spawn-rate", type=float, default=1000)
    parser.add_argument("--port", type=int, default=8470)
    parser.add_argument("--profile", action="store_true", help="cProfile each worker over the window; print the heaviest functions")
    parser.add_argument("--locustfile", help="measure another version of the Locust user (e.g. one from git history)")
    parser.add_argument("--step", type=float, help="engine-like server: one chunk for every running stream per STEP seconds")
    parser.add_argument("--max-num-seqs", type=int, default=2048, help="with --step: streams running at once per server process")
    parser.add_argument("--aiperf", help="also run this AIPerf executable (`aiperf profile`) on the same server and load")
    parser.add_argument("--tokenizer", help="with --aiperf: a local tokenizer directory for AIPerf (no hub access)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--analyse", metavar="DIR", help="compute the figures again from a finished run's directory (its --out), "
                        "measuring nothing; the load's options come from DIR/capacity-args.json, or from these flags where a run "
                        "wrote none (an older run)")
    args = parser.parse_args()
    if args.analyse:
        out = Path(args.analyse)
        if (out / ARGS_FILE).is_file():
            args = argparse.Namespace(**json.loads((out / ARGS_FILE).read_text()))
        return analyse(args, out)

    out = Path(args.out or tempfile.mkdtemp(prefix="capacity-"))
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / ARGS_FILE, json.dumps({k: v for k, v in vars(args).items() if k != "analyse"}, indent=1))
    if args.locustfile:
        locust_run.LOCUSTFILE = Path(args.locustfile).resolve()
    if args.profile:
        os.environ["RIG_PROFILE"] = str(out)
    engine = ["--step", str(args.step), "--max-num-seqs", str(args.max_num_seqs)] if args.step else []
    server, base_url = timed_server.start(args.port, "--ttft", str(args.ttft), "--itl", str(args.itl),
                                          "--processes", str(args.server_processes), *engine)
    record = BootRecord(boot_id="capacity", ref="timed-server", recipe="tiny-cpu", variant=None, driver="benchmark",
                        base_url=base_url, boot_dir=str(out / "boot"), log_path="", manifest_dir="", served_model="timed")
    scenario = Scenario.model_validate({
        "schema": 1, "name": "capacity", "version": 1, "kind": "concurrency", "endpoint": "chat", "prompt_set": "prose",
        "prompt_tokens": 8, "max_tokens": args.max_tokens, "temperature": 0, "seed": 1, "users": args.users,
        "duration_s": args.duration, "ramp_s": max(2.0, args.ttft * 5), "spawn_rate": args.spawn_rate,
        "distributed": args.workers > 1})
    try:
        run_scenario(LoadTarget(load("tiny-cpu"), record, None), scenario, out / "run", workers=args.workers,
                     counter=FixedPrompts("fixed benchmark prompt"), prompts=[Prompt(name="p", text="hello", tokens=8)], progress=False)
        if args.aiperf:
            run_aiperf(args, base_url, out / "aiperf")
    finally:
        server.terminate()
        server.wait()
    return analyse(args, out)


def analyse(args: argparse.Namespace, out: Path) -> int:
    """The figures of a finished run, from what it wrote: rig's run directory (out/run) and AIPerf's
    (out/aiperf, with the CPU samples run_aiperf kept beside its export). Prints them and writes
    capacity.json; a run measured again gives the same figures."""
    step = args.step or args.itl  # the true ITL
    summary = RunSummary.read(out / "run")
    peer = aiperf_figures(args, out / "aiperf") if (out / "aiperf").is_dir() else None
    metrics = summary.metrics
    start, end = metrics.window.start, metrics.window.end
    span = end - start
    records = read_records(out / "run")
    delivered = sum(1 for r in records for t in r.chunks if start <= t <= end)
    running = min(args.users, args.max_num_seqs * args.server_processes) if args.step else args.users
    # With a binding cap on several server processes this assumes the streams spread evenly over
    # them; SO_REUSEPORT hashes each connection, so the true running count is lower by ~1-2%.
    uneven = bool(args.step) and args.server_processes > 1 and args.users > args.max_num_seqs
    offered = step_engine.offered_events_per_s(running, args.max_tokens, args.ttft, args.itl, args.step) * span
    clients = summary.clients
    processes = max(1, len(clients))
    # CPU seconds inside the window from the cumulative samples; a locustfile that does not write
    # them (an older version) is estimated from its once-a-second CPU percentages over the run.
    cpu_seconds = [c.cpu_s if c.cpu_s is not None else (c.cpu_percent_mean or 0.0) / 100 * span for c in clients]
    lag_p99 = max(c.lag_p99_ms or 0.0 for c in clients)
    lag_p50 = max(c.lag_p50_ms or 0.0 for c in clients)
    ratio = delivered / offered
    # the client's bounds by this rig's rules (rig.load.client_error), from the run's records and lag
    # samples: a run measured before a rule changed reads as that rule now reads it
    limit = next(iter(summary.client.figures.values())).limit if summary.client.figures else 0.01
    verdict = client_verdict(summary.clients, client_bounds(records, metrics.window, read_clients(out / "run"), limit,
                                                                read_dispatcher(out / "run")),
                             HEADLINE[summary.kind].name)
    valid = ratio >= 0.99 and bool(verdict.valid)
    bounds = {name: bound.bound for name, bound in verdict.figures.items()}
    result = {
        "users": args.users, "workers": args.workers, "server_processes": args.server_processes, "window_s": span,
        "locustfile": str(locust_run.LOCUSTFILE), "offered_events_per_s": offered / span, "delivered_events_per_s": delivered / span,
        "delivered_over_offered": ratio, "offered_assumes_even_spread": uneven, "events_per_s_per_worker": delivered / span / processes,
        "events_per_cpu_second": delivered / sum(cpu_seconds) if len(cpu_seconds) == len(clients) and sum(cpu_seconds) else None,
        "worker_cpu_s": cpu_seconds, "streams_per_worker": args.users / processes,
        "lag_p50_ms_worst_worker": lag_p50, "lag_p99_ms_worst_worker": lag_p99,
        "cpu_percent_mean_worst_worker": max((c.cpu_percent_mean or 0) for c in clients),
        # engine-like, TTFT has no one true value: admission waits for the next step, then prefill steps
        "ttft_mean_s": metrics.ttft_s.mean, "ttft_truth_s": None if args.step else args.ttft,
        "itl_mean_s": metrics.itl_s.mean, "itl_truth_s": step,
        "itl_p50_s": metrics.itl_s.p50, "itl_p50_error": error_of(metrics.itl_s.p50, step),
        "decode_tok_s": metrics.user_decode_tok_s.token_weighted, "decode_error": error_of(metrics.user_decode_tok_s.token_weighted, 1 / step),
        "client_bounds": bounds, "errors": metrics.requests.errors, "client_verdict": verdict.reasons, "valid": valid,
        "aiperf": peer,
        "host": summary.provenance.host.model_dump() if summary.provenance.host else None, "profiled": args.profile,
    }
    print(json.dumps(result, indent=1))
    per_core = result["events_per_cpu_second"]
    print(f"\n{args.users} streams on {processes} Locust process(es){' (profiled: cProfile slows them)' if args.profile else ''}: "
          f"delivered {ratio:.2%} of offered token events ({result['delivered_events_per_s']:.0f}/s, "
          f"{result['events_per_s_per_worker']:.0f}/s per process, "
          f"{'-' if per_core is None else format(per_core, ',.0f')} per CPU-second), "
          f"client lag p50 {lag_p50:.2f} ms p99 {lag_p99:.2f} ms -> {'VALID' if valid else 'INVALID'}")
    if uneven:
        print(f"note: offered assumes the {args.users} streams spread evenly over {args.server_processes} server processes "
              f"capped at {args.max_num_seqs}; connections hash unevenly, so delivered/offered reads ~1-2% low")
    print(f"rig:    ITL p50 {_pct(result['itl_p50_error'])} from the truth (client bound {_pct(bounds.get('itl_p50_ms'))}), "
          f"decode rate {_pct(result['decode_error'])} (bound {_pct(bounds.get('user_decode_tok_s'))})")
    if peer and peer.get("error"):
        print(f"AIPerf: {peer['error']}")
    elif peer:
        def count(value: float | None) -> str:
            return "-" if value is None else format(value, ",.0f")
        cost = (f"{count(peer['events_per_cpu_second'])} per CPU-second inside its steady window ({peer['processes']} processes; "
                f"{count(peer['events_per_cpu_second_whole_run'])} over its whole {peer['wall_s']:.1f} s run, "
                f"{peer['cpu_s']:.1f} CPU-s, start-up included)" if peer["cpu_kept"] else "its CPU was not kept (an older run)")
        print(f"AIPerf: {peer['delivered_events_per_s']:.0f} events/s, {cost}; ITL p50 {_pct(peer['itl_p50_error'])} from the truth, "
              f"decode rate {_pct(peer['decode_error'])}")
    write_text_atomic(out / "capacity.json", json.dumps(result, indent=1))
    if args.profile:
        profiles = sorted(out.glob("profile-*.pstats"))
        if profiles:
            stats = pstats.Stats(*map(str, profiles))
            print(f"\nheaviest functions by own time over {len(profiles)} process(es), {delivered} events in the window:")
            stats.sort_stats("tottime").print_stats(25)
    print(f"results: {out}")
    return 0


def error_of(value: float | None, truth: float) -> float | None:
    return None if value is None else value / truth - 1


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.3g}%"


def run_aiperf(args: argparse.Namespace, base_url: str, out: Path) -> None:
    """AIPerf on the same server: the same concurrency, output length and duration, streaming chat;
    its CPU from its whole process tree, sampled while it runs and kept in out/AIPERF_CPU_FILE
    (aiperf_figures reads its figures)."""
    import psutil

    out.mkdir(parents=True, exist_ok=True)
    command = [args.aiperf, "profile", "--model", "timed", "--url", base_url, "--endpoint-type", "chat", "--streaming",
               "--concurrency", str(args.users), "--benchmark-duration", str(args.duration),
               "--synthetic-input-tokens-mean", "8", "--output-tokens-mean", str(args.max_tokens), "--output-tokens-stddev", "0",
               "--extra-inputs", f"max_tokens:{args.max_tokens}", "--artifact-dir", str(out), "--ui-type", "none",
               # tokens as the server counts them (its usage), as rig counts them: AIPerf's own count of
               # the text with a tokenizer of its own can count other tokens than the server streamed
               "--use-server-token-count"]
    if args.tokenizer:
        command += ["--tokenizer", args.tokenizer]
    started = time.monotonic()
    cpu: dict[int, float] = {}  # every process AIPerf starts, sampled until each ends: its whole run, start-up included
    samples: list[tuple[float, float]] = []  # (wall clock, the tree's cumulative CPU): its CPU inside a window
    with open(out / "aiperf.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        tree = psutil.Process(process.pid)
        while process.poll() is None:
            for member in [tree, *tree.children(recursive=True)]:
                try:
                    times = member.cpu_times()
                    cpu[member.pid] = times.user + times.system
                except psutil.Error:
                    pass
            samples.append((time.time(), sum(cpu.values())))  # AIPerf stamps its records with the wall clock
            time.sleep(0.1)
    # kept before anything reads the export: a figure computed from it later still has AIPerf's CPU
    write_text_atomic(out / AIPERF_CPU_FILE, json.dumps({"returncode": process.returncode, "processes": len(cpu),
                                                          "cpu_s": sum(cpu.values()), "wall_s": time.monotonic() - started,
                                                          "samples": samples}))


def aiperf_figures(args: argparse.Namespace, out: Path) -> dict:
    """AIPerf's figures from its directory: its export read by rig's importer (rig.load.peers) and
    computed by the same definitions as rig's own; its CPU from the samples run_aiperf kept (None,
    said so, for a run that kept none)."""
    from rig.load.metrics import cpu_seconds
    from rig.load.peers import import_file

    kept = json.loads((out / AIPERF_CPU_FILE).read_text()) if (out / AIPERF_CPU_FILE).is_file() else {}
    cpu_s = kept.get("cpu_s")
    process_tree = {"processes": kept.get("processes"), "cpu_s": cpu_s, "wall_s": kept.get("wall_s"), "cpu_kept": bool(kept)}
    export = next(iter(sorted(out.rglob("profile_export.jsonl"))), None)
    if kept.get("returncode", 0) != 0 or export is None:
        return {"error": f"aiperf exited {kept.get('returncode')}; see {out / 'aiperf.log'}", **process_tree,
                "delivered_events_per_s": 0.0, "events_per_cpu_second": None, "events_per_cpu_second_whole_run": None,
                "window_cpu_s": None, "itl_p50_error": None, "decode_error": None}
    imported_dir = out / "imported"
    if imported_dir.is_dir() and (imported_dir / "summary.json").is_file():  # analysed before: its import is kept
        imported_summary = RunSummary.read(imported_dir)
    else:
        imported_summary = import_file(export, None, out=imported_dir, progress=False).summary
    records = read_records(imported_dir)
    events = sum(len(r.chunks) for r in records)
    first_send = min((r.t_send for r in records), default=0.0)
    span = max((r.t_last or r.t_send for r in records), default=0.0) - first_send
    # Its steady window, and its CPU inside it as rig's own is measured: events per CPU-second like
    # for like, start-up and shutdown left out. AIPerf's records name no user, so rig's rule (every
    # user past its first token plus one request lifetime) is read off its closed loop instead: the
    # window opens one median request lifetime after the send that filled the last concurrency
    # slot, and closes when its benchmark duration ends.
    window = aiperf_steady_window(records, args.users, first_send + args.duration)
    window_events = sum(1 for r in records for t in r.chunks if window.start <= t <= window.end)
    window_cpu = cpu_seconds([tuple(sample) for sample in kept.get("samples", [])], window) if window.steady else None
    metrics = imported_summary.metrics
    return {**process_tree, "events": events,
            "delivered_events_per_s": events / span if span > 0 else 0.0,
            "events_per_cpu_second_whole_run": events / cpu_s if cpu_s else None,
            "window": window.model_dump(), "window_events": window_events, "window_cpu_s": window_cpu,
            "events_per_cpu_second": window_events / window_cpu if window_cpu else None,
            "itl_p50_s": metrics.itl_s.p50, "itl_p50_error": error_of(metrics.itl_s.p50, args.step or args.itl),
            "decode_error": error_of(metrics.user_decode_tok_s.token_weighted, 1 / (args.step or args.itl))}


def aiperf_steady_window(records: list[RequestRecord], users: int, stopping: float) -> Window:
    """See run_aiperf: the steady window of a closed loop of `users` slots whose records name no user."""
    sends = sorted(r.t_send for r in records)
    run_start, run_end = (sends[0], stopping) if sends else (stopping, stopping)
    lifetimes = [r.t_last - r.t_send for r in records if r.t_last is not None and r.error is None]
    if len(sends) < users or not lifetimes:
        return Window(start=run_start, end=run_end, run_start=run_start, run_end=run_end, steady=False,
                      opened_by=f"{len(sends)} requests for {users} slots, {len(lifetimes)} completed: no steady state")
    start = sends[users - 1] + median(lifetimes)
    reason = f"every slot busy (+{sends[users - 1] - run_start:.2f} s) plus one request lifetime ({median(lifetimes):.2f} s)"
    return Window(start=min(start, run_end), end=run_end, run_start=run_start, run_end=run_end, steady=start < run_end,
                  opened_by=reason)


if __name__ == "__main__":
    sys.exit(main())
