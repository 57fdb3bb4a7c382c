"""`rig tune`: race the candidates of a space across boots and name the fastest with stated
certainty (rig.tune.rule). rig.cli lists COMMANDS beside its own."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rig import paths
from rig.cli_args import Command, LoadOptions, amount, boot_port, count, size_and_workers, window
from rig.errors import Invalid, NotFound, RigError
from rig.exits import Exit

EXAMPLES = (
    "rig tune tiny-cpu --space recipes/spaces/tiny-cpu-token-delay.yaml --scenario prose-c1 --baseline base-d0",
    "rig tune llama8b-h200 --space recipes/spaces/llama8b-decode-batch.yaml --scenario decode-c32 --max-boots 24 --margin 0.3%",
    "rig tune llama8b-h200 --space recipes/spaces/llama8b-gpu-delay.yaml --scenario prose-c1 --baseline us0 "
    "--out /tmp/rig-results/tune/gpu-delay --resume   # the same command in every packed step",
)
DESCRIPTION = (
    "Race the candidates of a space across boots: each round boots every surviving candidate once in a "
    "position-balanced order with the boot-state control, and a candidate leaves once its interval against the best "
    "(boot noise pooled over the survivors) shows it worse, with the chance of any wrong elimination held at 5% over "
    "the whole race. It stops "
    "when one candidate remains, when every survivor is within --margin of the best, or when the boot, round or "
    "time budget runs out, and says which. Writes tune.md, tune.json, tune.png and winner.yaml (the winner as a "
    "recipe variant) in its directory; --resume goes on after Ctrl-C or a lost host. The space is a strict YAML "
    "file whose candidates are variants x server-argument sets x environment sets: `variants: [cb]`, "
    "`server_args: {base: [], big: [--max-num-seqs, \"256\"]}`, `env: {d0: {RIG_TOKEN_DELAY_MS: \"0\"}}`, and optional "
    "`constraints: {ttft_p99_ms: 500, greedy_identical: true, mean_abs_dlogprob: 0.05}`, and optional "
    "`goodput: {ttft: 500, tpot: 50}` (SLOs in ms: the objective becomes goodput; or --goodput) (docs/tune.md). A bad "
    "space is refused before anything boots, in one line: the file, the field, the fix."
)


def margin(text: str) -> float:
    """--margin 0.3% or 0.3: a percentage in (0, 100]."""
    return amount(0, 100)(text.removesuffix("%"))


def _state_unknowable(recipe: str) -> bool:
    """An engine that keeps compile caches and whose log cannot say a boot compiled: the race opens
    with a burn-in boot of the baseline (rig compare's rule)."""
    from rig.deploy.recipe import load
    from rig.engines import ENGINES

    engine = ENGINES[load(recipe).recipe.engine.name]
    return bool(engine.compile_caches) and engine.compile_log is None


def _out_dir(out: str | None, resume: bool) -> Path:
    if out is not None:
        return Path(out)
    root = paths.results_dir() / "tune"
    if not resume:
        return root / time.strftime("%Y%m%d-%H%M%S")
    races = sorted(p for p in root.glob("*/race.json")) if root.is_dir() else []
    if not races:
        raise NotFound(str(root), "--resume", "no race to resume", "name the race's directory with --out DIR")
    return races[-1].parent


def tune(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from rig.boot.state import refuse_if_port_taken, refuse_if_up
    from rig.compare.design import DEFAULT_ROUND_S
    from rig.deploy.recipe import load, split_ref
    from rig.load.figures import HEADLINE
    from rig.load.scenarios import load_scenario
    from rig.loadrun.session import default_small
    from rig.tune.goodput import OBJECTIVE as GOODPUT
    from rig.tune.plan import RACE_FILE, RacePlan
    from rig.tune.result import write
    from rig.tune.rule import FIRST_LOOK
    from rig.tune.run import Racer
    from rig.tune.space import load_space
    from rig.typed import first_problem

    name, variant = split_ref(args.recipe)
    if variant:
        raise RigError("command line", "recipe", "tune takes a recipe name; variants are an axis of the space",
                       f"list {variant} under variants: in the space file")
    scenario = load_scenario(args.scenario)
    out = _out_dir(args.out, args.resume)
    if (out / RACE_FILE).exists() and not args.resume:
        raise RigError(str(out), "--out", "already holds a race", "add --resume to go on with it, or name a new directory")
    resolved = load(name)
    small = LoadOptions.of(args).sized(default_small(resolved))
    space = load_space(Path(args.space), name, args.scenario, args.baseline, small=small, goodput=args.goodput)
    if args.max_boots is not None and args.max_boots < FIRST_LOOK * len(space.candidates):
        raise RigError("command line", "--max-boots", f"{args.max_boots} boots cannot reach the race's first look "
                       f"({FIRST_LOOK} rounds of {len(space.candidates)} candidates)",
                       f"pass --max-boots {FIRST_LOOK * len(space.candidates)} or more, or race fewer candidates")
    headline = HEADLINE[scenario.kind]
    objective, higher = (GOODPUT, True) if space.slos else (headline.name, headline.higher_is_better)
    rounds = args.max_rounds
    try:
        plan = RacePlan(recipe=name, scenario=args.scenario, space=args.space, candidates=space.candidates,
                        baseline_given=args.baseline is not None, constraints=space.constraints, objective=objective,
                        slos=space.slos, higher_is_better=higher, max_rounds=rounds,
                        max_boots=args.max_boots or len(space.candidates) * rounds, max_minutes=args.max_minutes,
                        margin_pct=args.margin, alpha=0.05, rounds=args.rounds, small=small,
                        duration_s=args.duration if args.duration is not None or small else DEFAULT_ROUND_S,
                        workers=args.workers, boot_state_control=not args.no_burn_in,
                        burn_in_first=not args.no_burn_in and _state_unknowable(name))
        plan.compare_plan()  # every boot's comparison plan, checked before the race's plan is written
    except ValidationError as error:
        field, problem = first_problem(error)
        raise Invalid("command line", field, problem, "see `rig tune --help` for what each option takes") from None
    if (out / RACE_FILE).exists():
        saved = RacePlan.read(out)
        was, now = saved.model_dump(exclude={"created", "space"}), plan.model_dump(exclude={"created", "space"})
        differing = [key for key in now if was.get(key) != now[key]]
        if differing:
            raise RigError(str(out / RACE_FILE), differing[0], f"this directory holds another race (its {', '.join(differing)} "
                           "differ from this command's)", "resume with the same command line, or use a new --out")
        plan = saved
        print(f"tune: resuming the race in {out}")
    else:
        refuse_if_up(name)
        refuse_if_port_taken(resolved, args.port)
        out.mkdir(parents=True, exist_ok=True)
        plan.write(out)
        print(f"tune: {len(plan.candidates)} candidates of {args.space} on {args.scenario} ({plan.objective_text()}); "
              f"at most {plan.max_rounds} rounds, {plan.max_boots} boots; race in {out}")
    racer = Racer(plan, out, progress=not args.quiet, steps=args.verbose, port=args.port)
    try:
        state = racer.run()
    except KeyboardInterrupt:
        print(f"tune: stopped; every finished boot is kept in {out}: run the same command with --out {out} --resume "
              "to go on", file=sys.stderr)
        raise
    result, text = write(out, plan, state)
    print(text)
    print(f"report: {out}/tune.md, tune.json, tune.png" + (", winner.yaml" if result.winner else ""))
    if result.void:
        return Exit.VOID
    return Exit.OK if result.stop in ("one", "equivalent") else Exit.UNDECIDED


def _tune_arguments(p: argparse.ArgumentParser) -> None:
    from rig.compare.design import DEFAULT_ROUNDS, MAX_PAIRS
    from rig.load.goodput import SLO_FORMAT
    from rig.tune.rule import DEFAULT_MARGIN_PCT, DEFAULT_MAX_ROUNDS

    p.add_argument("recipe", help="a recipe name (its variants are an axis of the space)")
    p.add_argument("--space", required=True, help="the space: a YAML file of variants, server_args and env sets, "
                   "and constraints (see above and docs/tune.md)")
    p.add_argument("--scenario", required=True, help="the scenario whose headline is the objective (e.g. prose-c1 "
                   "and decode-c32: per-user decode tok/s; c3000: output tok/s)")
    p.add_argument("--baseline", help="the candidate you run today: booted first, the reference of greedy identity "
                   "and of the winner's `rig compare` line (default: the first candidate)")
    p.add_argument("--max-boots", type=count(2, 1024), help="the most measured boots of the race (default: every "
                   "candidate in every round)")
    p.add_argument("--max-rounds", type=count(3, MAX_PAIRS), default=DEFAULT_MAX_ROUNDS,
                   help=f"the most race rounds (default {DEFAULT_MAX_ROUNDS}); the error control spends its looks over them")
    p.add_argument("--max-minutes", type=amount(0, 7 * 24 * 60), help="stop before a round once the boots took this "
                   "long in all (summed over every step of a resumed race)")
    p.add_argument("--margin", type=margin, default=DEFAULT_MARGIN_PCT, help="the equivalence margin, e.g. 0.3%% "
                   f"(default {DEFAULT_MARGIN_PCT}%%): stop once every survivor is within it of the best")
    p.add_argument("--rounds", type=count(1, MAX_PAIRS), default=DEFAULT_ROUNDS,
                   help=f"measured load rounds per boot (default {DEFAULT_ROUNDS})")
    p.add_argument("--goodput", metavar="SLOS", help="race on goodput (completed requests/s that met every SLO) "
                   f"instead of the headline: {SLO_FORMAT}; a request within the client's bound of a limit counts as missing it")
    p.add_argument("--out", help="the race's directory (default: results/tune/<timestamp>)")
    p.add_argument("--resume", action="store_true", help="go on with the race in --out (default: the newest under "
                   "results/tune/); with --out naming a directory that holds no race yet, start it there, so every "
                   "packed step of a host that may vanish runs the same command")
    p.add_argument("--no-burn-in", action="store_true", help="skip the boot-state control (no burn-in boots)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the result")
    p.add_argument("-v", "--verbose", action="store_true", help="each boot's and each load run's own progress too")


COMMANDS = [
    Command("tune", tune, "race configurations across boots; name the fastest with stated certainty",
            DESCRIPTION, EXAMPLES, _tune_arguments, shared=(size_and_workers, window, boot_port)),
]
