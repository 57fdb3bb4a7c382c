"""Simulated comparisons built from per-request records, for the tests that calibrate what a
comparison report prints. Every figure goes through the code `rig compare` runs: records ->
steady_window -> summarize -> RunSummary -> run_result (headline, goodput, latency histograms) ->
BootEntry -> analyze.

The server is prose-c1 at c=1: one user sends requests back to back for duration_s; each request
waits a time to first token, then streams TOKENS tokens one chunk each, one decode step apart.
Steps jitter 5% and one in a hundred stalls 3x (an ITL tail); TTFT scatters 25% (lognormal).
A boot scales its decode step and its TTFT by its own factors exp(drift + N(0, boot_sd)), the
drift shared by the two boots of an ABBA block; a round scales both by exp(N(0, round_sd)). With
duration_s 60 a round has about 11 requests, as prose-c1 has on a real server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rig.compare.arms import Arm, boot_order
from rig.compare.measure import run_result
from rig.compare.model import BootEntry, ComparePlan, RunResult
from rig.load.metrics import steady_window, summarize
from rig.load.provenance import ClientSetup, Provenance, ScenarioRun
from rig.load.records import RequestRecord
from rig.load.summary import ClientVerdict, RunSummary

SCENARIO = "prose-c1"
TOKENS = 64
SIMULATED_SCENARIO = ScenarioRun(name=SCENARIO, version=1, kind="decode", endpoint="chat", users=1, prompt_tokens=64,
                                 max_tokens=TOKENS, duration_s=60.0)
SIMULATED_PROVENANCE = Provenance(recipe=None, variant=None, engine="simulated", image=None, boot_id="simulated",
                                  driver="simulated", base_url=None, served_model=None, host=None, client=ClientSetup(), time=0.0)
STEP_S = 0.08
TTFT_S = 0.15
NO_DIR = Path("/nonexistent/simulated-run")  # no records on disk: batching identity finds none
SLOS = {"ttft": TTFT_S}  # about half the requests meet it: goodput is neither 0 nor every request


@dataclass(frozen=True)
class Design:
    pairs: int = 4
    rounds: int = 3
    boot_sd: float = 0.02
    round_sd: float = 0.01
    drift_sd: float = 0.02
    duration_s: float = 60.0
    step_change: float = 0.0  # the arm's decode step is exp(step_change) times the baseline's
    ttft_change: float = 0.0


def simulate_round(rng: np.random.Generator, step_s: float, ttft_s: float, duration_s: float) -> list[RequestRecord]:
    records = []
    now = 0.0
    index = 0
    while now < duration_s:
        first = now + ttft_s * float(np.exp(rng.normal(0.0, 0.25)))
        gaps = step_s * np.exp(rng.normal(0.0, 0.05, TOKENS - 1)) * np.where(rng.random(TOKENS - 1) < 0.01, 3.0, 1.0)
        chunks = (first + np.concatenate(([0.0], np.cumsum(gaps)))).tolist()
        cut = chunks[-1] > duration_s
        records.append(RequestRecord(
            id=f"p-{index}", process="p", user="p-0", prompt="prose-0", prompt_tokens_target=64, t_send=now,
            prompt_nonce=f"n{index}", status=200, t_first=first, t_last=chunks[-1], t_end=chunks[-1] + 0.001,
            chunks=chunks, usage=None if cut else {"completion_tokens": TOKENS, "prompt_tokens": 64},
            finish_reason=None if cut else "length", error="cut_by_window" if cut else None))
        now = chunks[-1] + 0.002
        index += 1
    return records


def round_result(records: list[RequestRecord], duration_s: float, slos: dict[str, float] | None) -> tuple[RunResult, RunSummary]:
    window = steady_window(records, {"spawning_complete": 0.0, "stopping": duration_s}, users=1)
    summary = RunSummary(scenario=SIMULATED_SCENARIO, warmup=False, interrupted=False, provenance=SIMULATED_PROVENANCE,
                         metrics=summarize(records, window), client=ClientVerdict(valid=True, reasons=[], processes=1))
    return run_result(summary, records, NO_DIR, slos), summary


def simulate_comparison(rng: np.random.Generator, design: Design, slos: dict[str, float] | None = SLOS,
                        keep_summaries: list | None = None) -> tuple[ComparePlan, list[BootEntry]]:
    """One comparison of arms a (baseline) and b in ABBA order. `keep_summaries`, when given,
    collects (arm, block, RunSummary.metrics) of every round, for tests of per-round figures."""
    arms = [Arm(name="a"), Arm(name="b")]
    plan = ComparePlan(recipe="tiny-cpu", arms=arms, control=None, boots=design.pairs, rounds=design.rounds,
                       scenarios=[SCENARIO], small=False, slos=slos)
    drifts = {block: (rng.normal(0, design.drift_sd), rng.normal(0, design.drift_sd)) for block in range(design.pairs)}
    entries = []
    for index, (block, arm) in enumerate(boot_order(arms, design.pairs)):
        changed = arm.name == "b"
        step = STEP_S * math.exp(drifts[block][0] + rng.normal(0, design.boot_sd) + (design.step_change if changed else 0.0))
        ttft = TTFT_S * math.exp(drifts[block][1] + rng.normal(0, design.boot_sd) + (design.ttft_change if changed else 0.0))
        rounds = []
        for _ in range(design.rounds):
            factor = math.exp(rng.normal(0, design.round_sd))
            result, summary = round_result(simulate_round(rng, step * factor, ttft * factor, design.duration_s),
                                           design.duration_s, slos)
            rounds.append({SCENARIO: result})
            if keep_summaries is not None:
                keep_summaries.append((arm.name, block, summary.metrics))
        entries.append(BootEntry(index=index, block=block, arm=arm.name, spec="", control=False, attempt=1, rounds=rounds,
                                 started=float(index)))
    return plan, entries
