"""`rig compare` and `rig demo`: comparisons across boots."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rig.cli_args import (
    Command,
    LoadOptions,
    amount,
    boot_port,
    count,
    fingerprint_glob,
    keep_text,
    no_keep_text,
    size_and_workers,
    verbose,
    window,
)

if TYPE_CHECKING:  # imported when the command runs: `rig --help` stays cheap
    from rig.compare.command import CompareRequest


def cmd_compare(args: argparse.Namespace) -> int:
    from rig.compare.command import compare, exit_status
    from rig.compare.design import DEFAULT_BOOTS, FIRST_LOOK
    from rig.compare.output import answer
    from rig.compare.sequential import Decision, UntilDecided
    from rig.errors import Invalid

    keep_text(args)
    until = None
    if args.until_decided is not None:
        if not FIRST_LOOK <= args.boots <= args.until_decided:
            raise Invalid("command line", "--until-decided", f"--boots {args.boots} is the first look and --until-decided "
                          f"{args.until_decided} the last: need {FIRST_LOOK} <= --boots <= --until-decided (--boots "
                          f"defaults to {DEFAULT_BOOTS})", "e.g. --boots 3 --until-decided 8: looks after 3, 4, ... 8 pairs")
        until = UntilDecided(first=args.boots, most=args.until_decided)
    out, analysis = compare(compare_request(args), until=until, show_report=args.verbose)
    if not args.verbose:  # the report's text is in compare.md; the answer leads
        print("\n".join(answer(analysis)))
        print(f"report: {out}/compare.md (every figure, latency, identity, conditions), compare.json, compare.png")
    return exit_status(analysis, Decision.read(out) if analysis.plan.stopping_rule is not None else None)  # a resume's too


def compare_request(args: argparse.Namespace) -> CompareRequest:
    """The comparison `rig compare`'s options ask for, built once from them."""
    from rig.compare.command import CompareRequest

    return CompareRequest(recipe=args.recipe, arms=args.arm, control=args.control, boots=args.boots, rounds=args.rounds,
                          scenarios=args.scenario, load=LoadOptions.of(args), resume=args.resume, duration_s=args.duration,
                          target_pct=args.target, max_boots=args.max_boots, goodput=args.goodput,
                          accept_fingerprint=args.accept_fingerprint or [], cold_caches=args.cold_caches,
                          burn_in=not args.no_burn_in, port=args.port, driver=args.driver)


def cmd_demo(args: argparse.Namespace) -> int:
    from rig.demo import run_demo

    return run_demo(args.port, verbose=args.verbose)


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    from rig.compare.design import DEFAULT_BOOTS, DEFAULT_ROUNDS, FIRST_LOOK, MAX_PAIRS
    from rig.load.goodput import SLO_FORMAT

    p.add_argument("recipe", help="a recipe name (variants are arms: --arm NAME:@variant)")
    p.add_argument("--arm", action="append", required=True, help="NAME:KEY=VALUE[,..] | NAME:@variant | NAME:image=TAG; "
                   "the first is the baseline; a KEY alone takes its value from rig's environment (for a secret: it then "
                   "never reaches the command line, and no value is written down)")
    p.add_argument("--control", help="an arm known to change greedy output, booted once")
    p.add_argument("--boots", type=count(1, MAX_PAIRS), default=DEFAULT_BOOTS,
                   help=f"boot pairs (boots per arm, ABBA; default {DEFAULT_BOOTS}, from the calibration)")
    p.add_argument("--rounds", type=count(1, MAX_PAIRS), default=DEFAULT_ROUNDS,
                   help=f"measured rounds per boot (default {DEFAULT_ROUNDS})")
    p.add_argument("--target", type=amount(0, 100), help="keep adding boot pairs until every headline 95%% interval is "
                   "within +-TARGET percent (e.g. 1), up to --max-boots")
    p.add_argument("--max-boots", type=count(1, MAX_PAIRS), help="with --target: the most boot pairs to run (default: twice --boots)")
    p.add_argument("--until-decided", type=count(FIRST_LOOK, MAX_PAIRS), metavar="MOST", help="add boot pairs one at a "
                   "time after --boots (3 or more) until every headline interval excludes 0, up to MOST pairs; each look's "
                   "interval is Bonferroni over the looks, so the false-verdict rate stays 5%% (exit 7 when MOST pairs "
                   "leave it undecided; `rig demo` runs this rule)")
    p.add_argument("--goodput", help=f"SLOs for goodput: {SLO_FORMAT}")
    p.add_argument("--accept-fingerprint", type=fingerprint_glob, action="append", help="a host fingerprint field allowed "
                   "to differ between boots (glob, e.g. 'gpus.*.power_limit_w'); any other condition difference voids the comparison")
    p.add_argument("--scenario", action="append", help="scenario name (repeatable; default prose-c1)")
    p.add_argument("--resume", help="a results/compare/<timestamp> directory to continue")
    p.add_argument("--cold-caches", action="store_true", help="boot every engine with empty compile/kernel caches of "
                   "its own (boot times then compare like with like; the user's caches are not touched)")
    p.add_argument("--no-burn-in", action="store_true", help="skip the boot-state control: no burn-in boot first, no "
                   "second boot of a measured boot that compiled; states are still recorded and a difference still voids")
    no_keep_text(p)
    p.add_argument("--driver", choices=["native", "compose", "slurm"], help="the driver every boot uses (default: the "
                   "recipe's own; part of the plan)")


COMMANDS = [
    Command("compare", cmd_compare, "before/after comparison across boots (ABBA, warmup discarded, paired CIs)",
            "Boot each arm in ABBA order, measure each boot's rounds after its warmup, and give the change with its "
            "interval over boot pairs (the boot is the unit of replication), with greedy identity, quality, boot "
            "conditions and the boot-state control beside it. compare.md, compare.json and compare.png hold the report.",
            ("rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4",
             "rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4 --target 5 --max-boots 8",
             "rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4 --boots 3 --until-decided 8",
             "rig compare tiny-cpu --arm off:RIG_TOKEN_DELAY_MS=0 --arm on:RIG_TOKEN_DELAY_MS=4 --resume results/compare/<timestamp>"),
            _compare_arguments, shared=(size_and_workers, window, boot_port, verbose)),
    Command("demo", cmd_demo, "boot tiny-cpu, stream a chat, load test, compare until decided, shut down",
            "rig's job end to end on this machine in a few minutes: boot tiny-cpu, stream a chat, run a load test, then "
            "compare token_delay off vs on, whose answer is known (slower), adding boot pairs until the verdict is "
            "decided (3 to 12 pairs). The first and last lines after the run are the verdict; exit 7 when the machine "
            "was too busy to decide.",
            ("rig demo", "rig demo --port 8400 --verbose"), shared=(boot_port, verbose)),
]
