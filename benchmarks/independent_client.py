"""Cross-check rig's per-user decode figure against an independent streaming client.

The independent client shares nothing with rig's load path: the standard library's http.client
(not requests, not Locust, not gevent), one blocking connection, its own SSE parsing, timestamps
from time.perf_counter. It streams the same prompt sizes back to back at concurrency 1 and
reports total decode tokens / total decode time (first to last content chunk), as rig does.
Runs interleave (rig, independent, rig, ...) on one boot of tiny-cpu so drift falls on both.

    .venv/bin/python benchmarks/independent_client.py [--pairs 3] [--seconds 6]
    .venv/bin/python benchmarks/independent_client.py --timed [--pairs 5] [--seconds 6]

With --timed both clients stream from rig's timed server instead (rig.testing.timed_server: a
known TTFT and a known step between tokens), so each is held to the truth as well as to the
other: on tiny-cpu, 6 s runs of the server itself differ by tens of percent on a 2-core box,
more than the clients could; against the timed server, what differs is the clients.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rig.boot import driver_for  # noqa: E402
from rig.deploy.recipe import load  # noqa: E402
from rig.load.prompts import TokenCounter, build_prompts
from rig.load.scenarios import load_scenario  # noqa: E402
from rig.loadrun.runner import LoadTarget  # noqa: E402
from rig.loadrun.session import model_dir_for, run_scenarios  # noqa: E402


def independent_run(base_url: str, model: str, prompts: list[str], max_tokens: int, seconds: float) -> dict[str, float]:
    """Sequential streams for `seconds`; tokens counted from the final usage, 1 per chunk checked."""
    parts = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    decode_tokens = decode_seconds = 0.0
    requests = 0
    deadline = time.perf_counter() + seconds
    index = 0
    while time.perf_counter() < deadline:
        body = json.dumps({"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
                           "messages": [{"role": "user", "content": prompts[index % len(prompts)]}],
                           "stream_options": {"include_usage": True}})
        index += 1
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        chunks: list[float] = []
        usage = None
        buffer = b""
        while True:
            data = response.read1(65536)
            now = time.perf_counter()
            if not data:
                break
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                event = json.loads(line[5:])
                usage = event.get("usage") or usage
                if any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                    chunks.append(now)
        tokens = (usage or {}).get("completion_tokens", len(chunks))
        if len(chunks) >= 2:
            decode_tokens += tokens - tokens / len(chunks)
            decode_seconds += chunks[-1] - chunks[0]
            requests += 1
    connection.close()
    return {"user_decode_tok_s": decode_tokens / decode_seconds if decode_seconds else float("nan"), "requests": requests}


TIMED_STEP_S, TIMED_TTFT_S, TIMED_TOKENS = 0.02, 0.1, 64


def timed(args: argparse.Namespace) -> int:
    """rig (Locust, its own definitions) and the independent client, interleaved, on the timed
    server: per-user decode rate against the truth (1 / step) and against each other."""
    from rig.boot.record import BootRecord
    from rig.load.prompts import FixedPrompts
    from rig.load.wire import Prompt
    from rig.loadrun.runner import run_scenario
    from rig.testing import timed_server

    server, base_url = timed_server.start(args.port, "--ttft", str(TIMED_TTFT_S), "--itl", str(TIMED_STEP_S))
    truth = 1 / TIMED_STEP_S
    rig_figures, independent = [], []
    try:
        record = BootRecord(boot_id="crosscheck", ref="timed-server", recipe="tiny-cpu", variant=None, driver="benchmark",
                            base_url=base_url, boot_dir=tempfile.mkdtemp(prefix="rig-crosscheck-boot-"), log_path="",
                            manifest_dir="", served_model="timed")
        scenario = load_scenario("prose-c1").with_changes(max_tokens=TIMED_TOKENS, duration_s=args.seconds, ramp_s=0.0)
        root = Path(tempfile.mkdtemp(prefix="rig-crosscheck-"))
        independent_run(base_url, "timed", ["hello"], TIMED_TOKENS, 2.0)  # its own warm-up
        for pair in range(args.pairs):
            summary = run_scenario(LoadTarget(load("tiny-cpu"), record, None), scenario, root / f"pair-{pair}",
                                   counter=FixedPrompts("fixed benchmark prompt"),
                                   prompts=[Prompt(name="p", text="hello", tokens=8)], progress=False)
            figure = summary.metrics.user_decode_tok_s.token_weighted
            if figure is None:  # no completed request in its window: say so, and measure the pair again longer
                print(f"pair {pair}: rig measured nothing ({'; '.join(summary.problems())}): pass a longer --seconds")
                continue
            rig_figures.append(figure)
            independent.append(independent_run(base_url, "timed", ["hello"], TIMED_TOKENS, args.seconds)["user_decode_tok_s"])
            print(f"pair {pair}: rig {rig_figures[-1]:.3f} tok/s ({100 * (rig_figures[-1] / truth - 1):+.3f}% from the truth), "
                  f"independent {independent[-1]:.3f} ({100 * (independent[-1] / truth - 1):+.3f}%)")
    finally:
        server.terminate()
        server.wait()
    if not rig_figures:
        return 1
    rig_median, independent_median = statistics.median(rig_figures), statistics.median(independent)
    difference = 100 * (rig_median / independent_median - 1)
    print(f"timed server, truth {truth:.1f} tok/s per user: median of {args.pairs} interleaved runs: rig {rig_median:.3f} "
          f"({100 * (rig_median / truth - 1):+.3f}%), independent {independent_median:.3f} "
          f"({100 * (independent_median / truth - 1):+.3f}%), rig vs independent {difference:+.3f}%")
    return 0 if abs(difference) <= 1 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--timed", action="store_true", help="both clients on rig's timed server (known timing), not tiny-cpu")
    parser.add_argument("--port", type=int, default=8471, help="with --timed: the timed server's port")
    args = parser.parse_args()
    if args.timed:
        return timed(args)
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    record = driver.up(resolved, progress=False)
    rig_figures, independent = [], []
    try:
        target = LoadTarget(resolved, record, model_dir_for(resolved))
        scenario = load_scenario("prose-c1").scaled(True)
        prompts, nonce = build_prompts(scenario, TokenCounter(target.model_dir))
        texts = [(nonce.sample(__import__("random").Random(i)) if nonce else "") + p.text for i, p in enumerate(prompts)]
        root = Path(tempfile.mkdtemp(prefix="rig-crosscheck-"))
        independent_run(record.base_url, record.served_model or "", texts, scenario.max_tokens, 2.0)  # its own warm-up
        for pair in range(args.pairs):
            summary = run_scenarios(target, ["prose-c1"], True, 1, root / f"pair-{pair}", progress=False, duration_s=args.seconds)[-1]
            rig_figures.append(summary.metrics.user_decode_tok_s.token_weighted)
            independent.append(independent_run(record.base_url, record.served_model or "", texts, scenario.max_tokens,
                                               args.seconds)["user_decode_tok_s"])
            print(f"pair {pair}: rig {rig_figures[-1]:.1f} tok/s, independent {independent[-1]:.1f} tok/s "
                  f"(rig client {'ok' if not summary.problems() else summary.problems()})")
    finally:
        driver.down(record)
    rig_median, independent_median = statistics.median(rig_figures), statistics.median(independent)
    difference = 100 * (rig_median / independent_median - 1)
    print(f"median of {args.pairs} interleaved runs: rig {rig_median:.1f} tok/s, independent {independent_median:.1f} tok/s, "
          f"difference {difference:+.2f}%")
    return 0 if abs(difference) <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
