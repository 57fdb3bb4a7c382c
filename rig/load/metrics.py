"""Metrics from raw per-request records, never from Locust's histograms.

A record (one JSON line, written by loadtests/locustfile.py) holds t_send, t_first, t_end,
the arrival time of every content chunk, usage, finish_reason, status and error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

TOKEN_MISMATCH_TOLERANCE = 0.02  # usage vs chunk count, as a fraction


def describe(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    array = np.asarray(values, dtype=float)
    return {"n": len(values), "mean": float(array.mean()), "p50": float(np.percentile(array, 50)),
            "p90": float(np.percentile(array, 90)), "p99": float(np.percentile(array, 99))}


def output_tokens(record: dict[str, Any]) -> int:
    usage = record.get("usage") or {}
    return int(usage.get("completion_tokens") or len(record.get("chunks") or []))


def tokens_per_chunk(record: dict[str, Any]) -> float:
    """Servers may put several tokens in one chunk; usage tells how many on average."""
    chunks = len(record.get("chunks") or [])
    usage = (record.get("usage") or {}).get("completion_tokens")
    return usage / chunks if usage and chunks else 1.0


def complete(record: dict[str, Any]) -> bool:
    return record.get("error") is None and record.get("t_first") is not None and record.get("finish_reason") is not None


def summarize(records: list[dict[str, Any]], window: tuple[float, float] | None = None,
              count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """Per-request latency statistics over completed requests that started inside the window,
    plus aggregate throughput from every chunk that arrived inside it. With `count_tokens` (the
    served tokenizer), usage is also checked against a re-tokenisation of the streamed text."""
    if window is None:
        starts = [r["t_send"] for r in records] or [0.0]
        ends = [r["t_end"] for r in records if r.get("t_end")] or [0.0]
        window = (min(starts), max(ends))
    start, end = window
    span = max(end - start, 1e-9)
    done = [r for r in records if complete(r) and start <= r["t_send"] <= end]
    ttft, tpot, e2e, user_tps, prefill_tps = [], [], [], [], []
    itl: list[float] = []
    mismatches = []
    tokenizer_differences = []
    for r in done:
        n = output_tokens(r)
        ttft.append(r["t_first"] - r["t_send"])
        e2e.append(r["t_end"] - r["t_send"])
        decode_time = r["t_end"] - r["t_first"]
        if n > 1 and decode_time > 0:
            tpot.append(decode_time / (n - 1))
            user_tps.append((n - 1) / decode_time)
        chunks = r["chunks"]
        itl.extend(b - a for a, b in zip(chunks, chunks[1:]))
        prompt_tokens = (r.get("usage") or {}).get("prompt_tokens")
        if prompt_tokens and r["t_first"] > r["t_send"]:
            prefill_tps.append(prompt_tokens / (r["t_first"] - r["t_send"]))
        usage_tokens = (r.get("usage") or {}).get("completion_tokens")
        if usage_tokens is not None and len(chunks) and abs(usage_tokens - len(chunks)) > TOKEN_MISMATCH_TOLERANCE * usage_tokens:
            mismatches.append(usage_tokens - len(chunks))
        if count_tokens is not None and usage_tokens and r.get("text") is not None:
            recount = count_tokens(r["text"])
            if abs(usage_tokens - recount) > TOKEN_MISMATCH_TOLERANCE * usage_tokens:
                tokenizer_differences.append(usage_tokens - recount)
    # Aggregate throughput: each chunk's tokens count at its arrival time, clipped to the window,
    # so requests the window's end cut still count what they produced inside it.
    window_tokens = 0.0
    window_prompt_tokens = 0
    for r in records:
        per_chunk = tokens_per_chunk(r)
        window_tokens += per_chunk * sum(1 for t in r.get("chunks") or [] if start <= t <= end)
        if r.get("t_first") and start <= r["t_first"] <= end:
            window_prompt_tokens += int((r.get("usage") or {}).get("prompt_tokens") or r.get("prompt_tokens_target") or 0)
    errors = Counter(r["error"] for r in records if r.get("error"))
    prompt_targets = [r.get("prompt_tokens_target") for r in done if r.get("prompt_tokens_target")]
    prompt_actual = [(r.get("usage") or {}).get("prompt_tokens") for r in done if (r.get("usage") or {}).get("prompt_tokens")]
    return {
        "window": {"start": start, "end": end, "seconds": span},
        "requests": {"total": len(records), "completed": len(done), "errors": dict(errors),
                     "cut_by_window": errors.get("cut_by_window", 0)},
        "ttft_s": describe(ttft),
        "itl_s": describe(itl),
        "tpot_s": describe(tpot),
        "e2e_s": describe(e2e),
        "user_decode_tok_s": describe(user_tps),
        "prefill_tok_s": describe(prefill_tps),
        "output_tok_s": window_tokens / span,
        "prompt_tok_s": window_prompt_tokens / span,
        "tokens": {
            "usage_vs_chunks_mismatched_requests": len(mismatches),
            "usage_vs_chunks_mean_difference": float(np.mean(mismatches)) if mismatches else 0.0,
            "tolerance": TOKEN_MISMATCH_TOLERANCE,
            "tokenizer_checked": count_tokens is not None,
            "usage_vs_tokenizer_mismatched_requests": len(tokenizer_differences),
            "usage_vs_tokenizer_mean_difference": float(np.mean(tokenizer_differences)) if tokenizer_differences else 0.0,
            "prompt_tokens_target": describe([float(x) for x in prompt_targets])["mean"],
            "prompt_tokens_usage": describe([float(x) for x in prompt_actual])["mean"],
        },
    }


def client_lag(client: dict[str, Any], window: tuple[float, float]) -> dict[str, Any]:
    """Event-loop lag percentiles of one Locust process, inside the measurement window only."""
    inside = sorted(lag for t, lag in client.get("lag", []) if window[0] <= t <= window[1])
    stats = describe(inside)
    return {"process": client.get("process"), "lag_samples": len(inside),
            "lag_p50_ms": None if stats["p50"] is None else 1000 * stats["p50"],
            "lag_p99_ms": None if stats["p99"] is None else 1000 * stats["p99"],
            "lag_max_ms": 1000 * inside[-1] if inside else None,
            "cpu_percent_mean": client.get("cpu_percent_mean"), "cpu_percent_max": client.get("cpu_percent_max")}


def client_verdict(clients: list[dict[str, Any]], lag_limit_ms: float = 5.0, cpu_limit: float = 90.0) -> dict[str, Any]:
    """A run whose client was saturated is invalid: its numbers describe the client, not the server.
    `clients` are client_lag() results."""
    if not clients:
        return {"valid": False, "reasons": ["no client statistics were written"], "processes": 0}
    worst_lag = max(c.get("lag_p99_ms") or 0.0 for c in clients)
    worst_cpu = max((c.get("cpu_percent_mean") or 0.0) for c in clients)
    reasons = []
    if worst_lag > lag_limit_ms:
        reasons.append(f"client event-loop lag p99 {worst_lag:.1f} ms > {lag_limit_ms} ms")
    if worst_cpu > cpu_limit:
        reasons.append(f"a client process averaged {worst_cpu:.0f}% CPU > {cpu_limit}%")
    return {"valid": not reasons, "reasons": reasons, "processes": len(clients), "lag_p99_ms": worst_lag,
            "lag_p50_ms": max(c.get("lag_p50_ms") or 0.0 for c in clients),
            "cpu_percent_mean_max": worst_cpu, "lag_limit_ms": lag_limit_ms,
            "server_clock": "unavailable (OpenAI streams carry only whole-second timestamps)"}
