"""Cross-check rig's per-user decode figure against an independent streaming client.

The independent client shares nothing with rig's load path: the standard library's http.client
(not requests, not Locust, not gevent), one blocking connection, its own SSE parsing, timestamps
from time.perf_counter. It streams the same prompt sizes back to back at concurrency 1 and
reports total decode tokens / total decode time (first to last content chunk), as rig does.
Runs interleave (rig, independent, rig, ...) on one boot of tiny-cpu so drift falls on both.

    .venv/bin/python benchmarks/independent_client.py [--pairs 3] [--seconds 6]
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
from rig.load.runner import LoadTarget  # noqa: E402
from rig.load.scenarios import load_scenario  # noqa: E402
from rig.load.session import model_dir_for, run_scenarios  # noqa: E402


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
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
