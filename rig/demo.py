"""`rig demo` (`make demo`): the project's main job end to end on the embedded default, tiny-cpu, in
a few minutes on two cores.

Boot, stream a chat, load test (the first run after the boot is the discarded warmup), shut down;
then a real comparison whose answer is known: the test-only token_delay adapter off vs on (4 ms per
model step against a ~2-4 ms step, so per-user decode speed falls by a half or more). Boots on a
busy 2-core box differ by up to 40% and a busy client leaves rounds out, so no fixed number of pairs
decides every time: boot pairs are added in ABBA order until the verdict is decided, from 3 up to
12 pairs (rig.compare.sequential: each look's interval is Bonferroni over the 10 looks, so the rule
keeps the stated 5% false-verdict rate). With one core busy-looping beside it, the demo's boots on
a 2-core box differed by 0-40% (boot sd), its rounds by 6-24%, up to half its rounds were left out
for the client's timing, and the slowdown read -52% to -65%: simulated at that noise, the rule
decides within 12 pairs in at least 98% of demos (tests/compare/test_compare_sequential.py). Each
boot has a warmup and three short measured rounds (a boot counts while one of them is usable), and
greedy identity is checked. transformers serve keeps no compile caches, so no burn-in boot is
needed.

The output leads with the answer: after the run, its first and last lines are the verdict; the
tables and notes are in the result files, and `--verbose` prints them as the demo runs. When
every pair ran undecided the verdict says the machine is too busy, and the exit code is 7.
"""

from __future__ import annotations

import time

from rig.boot import driver_for
from rig.boot.state import refuse_if_port_taken
from rig.chat import stream_chat
from rig.cli_args import LoadOptions
from rig.compare.command import CompareRequest, compare, exit_status
from rig.compare.report import Analysis
from rig.compare.sequential import Decision, UntilDecided, interval_text
from rig.deploy.recipe import load
from rig.exits import Exit
from rig.load.report import brief_notes, markdown_table, notes
from rig.loadrun.runner import LoadTarget, results_root
from rig.loadrun.session import model_dir_for, run_scenarios

DEMO_RECIPE = "tiny-cpu"
DEMO_PROMPT = "Explain in one sentence why zero-padding K from 576 to 640 can make a GEMM faster."
DEMO_SCENARIOS = ["prose-c1"]  # decode at concurrency 1: what the known effect moves
DEMO_ARMS = ["off:RIG_TOKEN_DELAY_MS=0", "on:RIG_TOKEN_DELAY_MS=4"]
DEMO_RULE = UntilDecided(first=3, most=12)  # 3 to 12 boot pairs, about 30 s a boot on a busy 2-core box
DEMO_ROUNDS, DEMO_ROUND_S = 3, 1.5  # three short rounds: the busy client voids some, a boot counts while one is left
LOAD_FIELDS = (
    "How to read it: each scenario runs once as its warmup after the boot (kept, marked, never compared). "
    "'user tok/s' is total decode tokens over total decode time (first to last output chunk), with the per-request "
    "p50 and p10 beside it, so one burst cannot move it. The window opens once every user has its first token plus "
    "one request lifetime and closes when Locust starts stopping users ('window s': its length and the share of the "
    "run kept). Tokens are counted from the server's usage (per chunk where it reports it). Every prompt starts with "
    "a unique nonce; 'cached' is the share of prompt tokens the server still answered from its prefix cache. 'usable' "
    "says whether a comparison may use the run: client neither stalled nor saturated, under 1% errors, a steady window."
)
COMPARE_FIELDS = (
    "How to read it: the boot is the unit of replication. Each boot's figure is the mean of its usable rounds; boots "
    "are paired by ABBA block and the delta's interval is a paired t interval over the pairs. 'boot sd' and "
    "'round sd' estimate the noise; 'N pairs resolve 1%' plans the next run (rig compare --target 1). Latency deltas "
    "(lower is better) sit under the headline."
)


def run_demo(port: int | None = None, verbose: bool = False) -> int:
    """`port`: where both the demo's boot and its comparison's boots listen (default: the recipe's).
    `verbose`: every progress line, table and note as it runs (they are in the result files either way)."""
    started = time.monotonic()
    resolved = load(DEMO_RECIPE)
    refuse_if_port_taken(resolved, port)  # once, up front: the comparison's boots use it too
    print(f"rig demo: {DEMO_RECIPE} (a small random-weight model on transformers serve, on this CPU): boot, chat, "
          "load test, then a comparison whose answer is known")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=port, progress=verbose)
    try:
        print(f"boot: {record.ref} healthy after {record.healthy_after_s:.1f} s at {record.base_url} (boot {record.boot_id})")
        print("chat (streamed; the weights are random, so the text is gibberish by design: the demo measures speed, "
              "not sense):\n  ", end="")
        result = stream_chat(record.base_url, record.served_model or "", DEMO_PROMPT, max_tokens=48)
        print(f"  [{result.chunks} chunks, usage {result.usage}, first token after {result.ttft_s or 0:.3f} s]")
        root = results_root(DEMO_RECIPE)
        summaries = run_scenarios(LoadTarget(resolved, record, model_dir_for(resolved)), DEMO_SCENARIOS, small=True,
                                  workers=None, root=root, duration_s=DEMO_ROUND_S, progress=verbose)
        print("load test (its first run after the boot is the warmup):\n" + markdown_table(summaries, brief=not verbose))
        for line in (n for s in summaries for n in (notes(s) if verbose else brief_notes(s))):
            print(line)
        if verbose:
            print(f"\n{LOAD_FIELDS}")
        print(f"load test: {root} (summary.md: every column and note)")
        if any(s.problems() for s in summaries if not s.warmup):
            print("load test: a run that is not usable is expected on a busy or small machine (the client could not keep "
                  "its timing); the comparison below leaves such rounds out and adds boot pairs until it decides")
    finally:
        driver.down(record)
        if verbose:
            print(f"{record.ref} stopped; boot log: {record.log_path}")
    print(f"comparison: token_delay off vs on ({DEMO_ARMS[1].split(':')[1]}: a known slowdown), {DEMO_ROUNDS} measured "
          f"rounds of {DEMO_ROUND_S:g} s per boot\nstopping rule: {DEMO_RULE.statement()}")
    if verbose:
        print(COMPARE_FIELDS)
    request = CompareRequest(recipe=DEMO_RECIPE, arms=DEMO_ARMS, boots=DEMO_RULE.first, rounds=DEMO_ROUNDS,
                             scenarios=DEMO_SCENARIOS, load=LoadOptions(small=True), duration_s=DEMO_ROUND_S, port=port)
    out, analysis = compare(request, until=DEMO_RULE, show_report=verbose, steps=verbose)
    decision = Decision.read(out)
    code = exit_status(analysis, decision)  # as `rig compare` would: a void or no-data comparison is no demonstration
    answer = verdict_line(analysis, decision, code)
    print(f"\n{answer}")
    for line in details(analysis, decision, time.monotonic() - started):
        print(f"  {line}")
    print(f"  report: {out}/compare.md (compare.png: the picture; until-decided.json: every look)")
    print(answer)
    return code


def verdict_line(analysis: Analysis, decision: Decision, code: int) -> str:
    """The demo's answer in one line: the direction, its interval, and how many pairs it took."""
    if code == Exit.VOID:
        return f"verdict: void: {analysis.void}"
    if code == Exit.UNUSABLE:
        return ("verdict: no data: no boot pair had a usable figure in both arms (on a busy machine the client's own "
                "timing leaves rounds out; compare.md says why each was left out)")
    look = decision.last
    if look is None or not look.comparisons:  # compare ran the rule, so it looked at least once
        return "verdict: none: the stopping rule made no look (until-decided.json)"
    scenario, arm, c = look.labelled()[0]
    where = (f"{analysis.scenarios[scenario].unit} {interval_text(c)} ({100 * c.confidence:.4g}% interval, "
             f"{c.pairs} usable boot pair(s) of {look.pairs_run} run)")
    if code == Exit.UNDECIDED:
        return (f"verdict: undecided after {look.pairs_run} boot pairs, the most the demo runs: {where}: this machine is too "
                "busy to resolve the known slowdown from its noise; run the demo again when it is quieter")
    known = "the known slowdown, resolved" if c.verdict == "slower" else "NOT the known slowdown"
    return f"verdict: {c.verdict}: token_delay {arm} vs {look.arms[0]}: {where}: {known}"


def details(analysis: Analysis, decision: Decision, seconds: float) -> list[str]:
    """The few lines between the two verdict lines: how the rule stopped, what was left out, the known effect."""
    look = decision.last
    lines = [f"took {seconds / 60:.1f} min; {len(decision.looks)} look(s) of the stopping rule"
             + (f", the last after {look.pairs_run} pair(s)" if look else "")]
    left_out = sum(len(x.rounds) for x in analysis.boots.exclusions)
    if left_out:
        lines.append(f"{left_out} round(s) left out for the client's timing (a busy machine); each boot's figure is the mean "
                     "of its usable rounds")
    for effect in analysis.known_effects:
        if effect.interval_ms is not None:
            agrees = "agrees with it" if effect.covered else "does NOT agree with it"
            lines.append(f"known effect: {effect.adapter} slept {effect.per_token_ms:+.2f} ms per token; the comparison's "
                         f"per-token interval [{effect.interval_ms[0]:+.2f}, {effect.interval_ms[1]:+.2f}] ms {agrees}"
                         + (f" from {100 * effect.tolerance:g}% below to {100 * effect.tolerance_above:g}% above"
                            if effect.tolerance else ""))
    return lines
