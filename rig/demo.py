"""`make demo`: the project's main job end to end on the embedded default, tiny-cpu, in about two
minutes on two cores.

Boot, stream a chat, load test (the first run after the boot is the discarded warmup), shut down;
then a real comparison whose answer is known: the test-only token_delay adapter off vs on (4 ms
per model step against a ~3-4 ms step, so per-user decode speed should fall by about half),
3 boot pairs in ABBA order (boots on a shared 2-core box differ by 10-20%, so 2 pairs cannot bound
the change), each boot with a warmup and two short measured rounds, a verdict with its interval, greedy
identity. transformers serve keeps no compile caches, so no burn-in boot is needed."""

from __future__ import annotations

from rig.boot import driver_for
from rig.boot.state import refuse_if_port_taken
from rig.chat import stream_chat
from rig.compare.command import compare, exit_status
from rig.deploy.recipe import load
from rig.load.report import markdown_table, notes
from rig.load.runner import LoadTarget, results_root
from rig.load.session import model_dir_for, run_scenarios

DEMO_RECIPE = "tiny-cpu"
DEMO_PROMPT = "Explain in one sentence why zero-padding K from 576 to 640 can make a GEMM faster."
DEMO_SCENARIOS = ["prose-c1"]  # decode at concurrency 1: what the known effect moves
DEMO_ARMS = ["off:RIG_TOKEN_DELAY_MS=0", "on:RIG_TOKEN_DELAY_MS=4"]
DEMO_PAIRS, DEMO_ROUNDS, DEMO_ROUND_S = 3, 2, 1.5  # two short rounds: a round the busy client voids leaves one
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
    "are paired by ABBA block and the delta's 95% interval is a paired t interval over the pairs. 'boot sd' and "
    "'round sd' estimate the noise; 'N pairs resolve 1%' plans the next run (rig compare --target 1). Latency deltas "
    "(lower is better) sit under the headline."
)


def run_demo(port: int | None = None) -> int:
    """`port`: where both the demo's boot and its comparison's boots listen (default: the recipe's)."""
    resolved = load(DEMO_RECIPE)
    refuse_if_port_taken(resolved, port)  # once, up front: the comparison's boots use it too
    driver = driver_for(resolved)
    record = driver.up(resolved, port=port)
    try:
        print(f"served model: {record.served_model}  ({record.base_url}, boot {record.boot_id}, "
              f"healthy after {record.healthy_after_s:.1f}s)")
        print(f"prompt: {DEMO_PROMPT}\nanswer (streamed; the model's weights are random, so the text is gibberish by "
              "design: the demo measures speed, not sense): ", end="")
        result = stream_chat(record.base_url, record.served_model or "", DEMO_PROMPT, max_tokens=48)
        print(f"[{result.chunks} chunks, usage {result.usage}, ttft {result.ttft_s or 0:.3f}s]\n")
        root = results_root(DEMO_RECIPE)
        summaries = run_scenarios(LoadTarget(resolved, record, model_dir_for(resolved)), DEMO_SCENARIOS, small=True,
                                  workers=None, root=root, duration_s=DEMO_ROUND_S)
        print("\n" + markdown_table(summaries))
        for line in (n for s in summaries for n in notes(s)):
            print(line)
        print(f"\n{LOAD_FIELDS}\nload-test results: {root}\n")
    finally:
        driver.down(record)
        print(f"{record.ref} stopped; boot log: {record.log_path}\n")
    print(f"comparison: token_delay off vs on ({DEMO_ARMS[1].split(':')[1]}: a known slowdown), {DEMO_PAIRS} boots each "
          f"in ABBA order, {DEMO_ROUNDS} measured rounds of {DEMO_ROUND_S:g} s per boot")
    print(COMPARE_FIELDS)
    _, analysis = compare(DEMO_RECIPE, DEMO_ARMS, None, boots=DEMO_PAIRS, rounds=DEMO_ROUNDS, scenarios=DEMO_SCENARIOS,
                          small=True, workers=None, resume=None, duration_s=DEMO_ROUND_S, port=port)
    return exit_status(analysis)  # as `rig compare` would: a void or no-data comparison is no demonstration
