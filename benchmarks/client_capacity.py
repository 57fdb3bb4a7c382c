"""Client capacity: how many token events per second rig's Locust client delivers per CPU core, and
with what event-loop lag, against a streaming server whose timing is known exactly.

    python benchmarks/client_capacity.py --users 3000 --workers 10 --server-processes 5 --duration 30
    python benchmarks/client_capacity.py --users 300 --workers 1 --profile            # where the time goes
    python benchmarks/client_capacity.py --users 300 --locustfile OLD.py              # another version, same load

Each stream sends a token every --itl seconds, so the offered token-event rate is known. The run
reports delivered / offered, events per second per worker process, events per CPU-second of the
worker processes (the client's cost per event, which is what the per-event work in the locustfile
decides), and the event-loop lag percentiles; it is invalid when fewer than 99% of offered events
arrived or lag p99 exceeded 5 ms. With --profile each worker runs cProfile over the window and
the heaviest functions are printed. Prints figures; asserts nothing (speed targets are checked by
reading them, on a machine whose cores are free: the timed server shares them)."""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "adapter"))

from rig.boot.base import BootRecord  # noqa: E402
from rig.deploy.recipe import load  # noqa: E402
from rig.load import runner  # noqa: E402
from rig.load.prompts import TokenCounter  # noqa: E402
from rig.load.records import read_records  # noqa: E402
from rig.load.runner import LoadTarget, run_scenario  # noqa: E402
from rig.load.scenarios import Scenario  # noqa: E402
from rig.load.wire import Prompt  # noqa: E402


class FixedPrompts(TokenCounter):
    def __init__(self) -> None:
        self.tokenizer = None

    @property
    def source(self) -> str:
        return "fixed benchmark prompt"


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
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    out = Path(args.out or tempfile.mkdtemp(prefix="capacity-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.locustfile:
        runner.LOCUSTFILE = Path(args.locustfile).resolve()
    if args.profile:
        os.environ["RIG_PROFILE"] = str(out)
    server = subprocess.Popen([sys.executable, "-m", "rig.load.timed_server", "--port", str(args.port), "--ttft", str(args.ttft),
                               "--itl", str(args.itl), "--processes", str(args.server_processes)], cwd=REPO)
    base_url = f"http://127.0.0.1:{args.port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base_url + "/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    record = BootRecord(boot_id="capacity", ref="timed-server", recipe="tiny-cpu", variant=None, driver="benchmark",
                        base_url=base_url, boot_dir=str(out / "boot"), log_path="", manifest_dir="", served_model="timed")
    scenario = Scenario.model_validate({
        "schema": 1, "name": "capacity", "version": 1, "kind": "concurrency", "endpoint": "chat", "prompt_set": "prose",
        "prompt_tokens": 8, "max_tokens": args.max_tokens, "temperature": 0, "seed": 1, "users": args.users,
        "duration_s": args.duration, "ramp_s": max(2.0, args.ttft * 5), "spawn_rate": args.spawn_rate,
        "distributed": args.workers > 1})
    try:
        summary = run_scenario(LoadTarget(load("tiny-cpu"), record, None), scenario, out / "run", workers=args.workers,
                               counter=FixedPrompts(), prompts=[Prompt(name="p", text="hello", tokens=8)], progress=False)
    finally:
        server.terminate()
        server.wait()
    metrics = summary.metrics
    start, end = metrics.window.start, metrics.window.end
    span = end - start
    delivered = sum(1 for r in read_records(out / "run") for t in r.chunks if start <= t <= end)
    request_time = args.ttft + (args.max_tokens - 1) * args.itl
    offered = args.users * (args.max_tokens / request_time) * span
    clients = summary.clients
    processes = max(1, len(clients))
    # CPU seconds inside the window from the cumulative samples; a locustfile that does not write
    # them (an older version) is estimated from its once-a-second CPU percentages over the run.
    cpu_seconds = [c.cpu_s if c.cpu_s is not None else (c.cpu_percent_mean or 0.0) / 100 * span for c in clients]
    lag_p99 = max(c.lag_p99_ms or 0.0 for c in clients)
    lag_p50 = max(c.lag_p50_ms or 0.0 for c in clients)
    ratio = delivered / offered
    valid = ratio >= 0.99 and lag_p99 <= 5.0
    result = {
        "users": args.users, "workers": args.workers, "server_processes": args.server_processes, "window_s": span,
        "locustfile": str(runner.LOCUSTFILE), "offered_events_per_s": offered / span, "delivered_events_per_s": delivered / span,
        "delivered_over_offered": ratio, "events_per_s_per_worker": delivered / span / processes,
        "events_per_cpu_second": delivered / sum(cpu_seconds) if len(cpu_seconds) == len(clients) and sum(cpu_seconds) else None,
        "worker_cpu_s": cpu_seconds, "streams_per_worker": args.users / processes,
        "lag_p50_ms_worst_worker": lag_p50, "lag_p99_ms_worst_worker": lag_p99,
        "cpu_percent_mean_worst_worker": max((c.cpu_percent_mean or 0) for c in clients),
        "ttft_mean_s": metrics.ttft_s.mean, "ttft_truth_s": args.ttft, "itl_mean_s": metrics.itl_s.mean, "itl_truth_s": args.itl,
        "errors": metrics.requests.errors, "client_verdict": summary.client.reasons, "valid": valid,
        "host": summary.provenance.host.model_dump() if summary.provenance.host else None, "profiled": args.profile,
    }
    print(json.dumps(result, indent=1))
    per_core = result["events_per_cpu_second"]
    print(f"\n{args.users} streams on {processes} Locust process(es){' (profiled: cProfile slows them)' if args.profile else ''}: "
          f"delivered {ratio:.2%} of offered token events ({result['delivered_events_per_s']:.0f}/s, "
          f"{result['events_per_s_per_worker']:.0f}/s per process, "
          f"{'-' if per_core is None else format(per_core, ',.0f')} per CPU-second), "
          f"client lag p50 {lag_p50:.2f} ms p99 {lag_p99:.2f} ms -> {'VALID' if valid else 'INVALID'}")
    (out / "capacity.json").write_text(json.dumps(result, indent=1))
    if args.profile:
        profiles = sorted(out.glob("profile-*.pstats"))
        if profiles:
            stats = pstats.Stats(*map(str, profiles))
            print(f"\nheaviest functions by own time over {len(profiles)} process(es), {delivered} events in the window:")
            stats.sort_stats("tottime").print_stats(25)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
