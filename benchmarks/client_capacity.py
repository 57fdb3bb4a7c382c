"""Client capacity: how many streams and token events per second rig's Locust client delivers
per worker core, and with what lag, against a streaming server whose timing is known exactly.

    python benchmarks/client_capacity.py --users 3000 --workers 10 --server-processes 5 --duration 30

Each stream sends a token every --itl seconds, so the offered token-event rate is known; the
run reports delivered / offered and the client's event-loop lag percentiles, and declares
itself invalid when fewer than 99% of offered events arrived or lag p99 exceeded 5 ms.
Prints figures; asserts nothing (speed targets are checked by reading them)."""

from __future__ import annotations

import argparse
import json
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
from rig.load.runner import LoadTarget, read_records, run_scenario  # noqa: E402
from rig.load.scenarios import Scenario  # noqa: E402
from rig.recipe import load  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--server-processes", type=int, default=5)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--itl", type=float, default=0.05, help="seconds between tokens of one stream (0.05 = 20 tok/s)")
    parser.add_argument("--ttft", type=float, default=0.1)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--spawn-rate", type=float, default=1000)
    parser.add_argument("--port", type=int, default=8470)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    server = subprocess.Popen([sys.executable, "-m", "rig.load.timed_server", "--port", str(args.port), "--ttft", str(args.ttft),
                               "--itl", str(args.itl), "--processes", str(args.server_processes)], cwd=REPO)
    base_url = f"http://127.0.0.1:{args.port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base_url + "/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    out = Path(args.out or tempfile.mkdtemp(prefix="capacity-"))
    record = BootRecord(boot_id="capacity", ref="timed-server", recipe="tiny-cpu", variant=None, driver="benchmark",
                        base_url=base_url, boot_dir=str(out / "boot"), log_path="", manifest_dir="", served_model="timed")
    scenario = Scenario(name="capacity", version=1, kind="concurrency", endpoint="chat", prompt_set="prose", prompt_tokens=8,
                        max_tokens=args.max_tokens, temperature=0, seed=1, users=args.users, duration_s=args.duration,
                        ramp_s=max(2.0, args.ttft * 5), spawn_rate=args.spawn_rate, distributed=True)

    class Fixed:
        source = "fixed"

    try:
        summary = run_scenario(LoadTarget(load("tiny-cpu"), record, None), scenario, out / "run", workers=args.workers,
                               counter=Fixed(), prompts=[{"name": "p", "text": "hello", "tokens": 8}], progress=False)
    finally:
        server.terminate()
        server.wait()
    metrics = summary["metrics"]
    start, end = metrics["window"]["start"], metrics["window"]["end"]
    records = read_records(out / "run")
    delivered = sum(1 for r in records for t in r["chunks"] if start <= t <= end)
    request_time = args.ttft + (args.max_tokens - 1) * args.itl
    offered = args.users * (args.max_tokens / request_time) * (end - start)
    clients = summary["clients"]
    lag_p99 = max(c["lag_p99_ms"] or 0.0 for c in clients)
    lag_p50 = max(c["lag_p50_ms"] or 0.0 for c in clients)
    ratio = delivered / offered
    valid = ratio >= 0.99 and lag_p99 <= 5.0
    result = {
        "users": args.users, "workers": args.workers, "server_processes": args.server_processes, "window_s": end - start,
        "offered_events_per_s": offered / (end - start), "delivered_events_per_s": delivered / (end - start),
        "delivered_over_offered": ratio, "events_per_s_per_worker": delivered / (end - start) / args.workers,
        "streams_per_worker": args.users / args.workers, "lag_p50_ms_worst_worker": lag_p50, "lag_p99_ms_worst_worker": lag_p99,
        "cpu_percent_mean_worst_worker": max((c["cpu_percent_mean"] or 0) for c in clients),
        "ttft_mean_s": metrics["ttft_s"]["mean"], "ttft_truth_s": args.ttft, "itl_mean_s": metrics["itl_s"]["mean"], "itl_truth_s": args.itl,
        "errors": metrics["requests"]["errors"], "valid": valid, "host": summary["provenance"]["host"],
    }
    print(json.dumps(result, indent=1))
    print(f"\n{args.users} streams on {args.workers} worker processes: delivered {ratio:.2%} of offered token events "
          f"({result['delivered_events_per_s']:.0f}/s, {result['events_per_s_per_worker']:.0f}/s per worker), "
          f"client lag p50 {lag_p50:.2f} ms p99 {lag_p99:.2f} ms -> {'VALID' if valid else 'INVALID'}")
    (out / "capacity.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
