"""`rig loadtest`, `rig sweep`, `rig export` and `rig import`: load tests and other tools' runs."""

from __future__ import annotations

import argparse

from rig.cli_args import (
    Command,
    LoadOptions,
    amount,
    boot_port,
    count,
    identity,
    keep_text,
    no_keep_text,
    size_and_workers,
    url,
    verbose,
    window,
)
from rig.errors import RigError
from rig.exits import Exit


def cmd_loadtest(args: argparse.Namespace) -> int:
    from rig.loadrun.command import loadtest

    keep_text(args)
    if args.slurm_workers and args.remote_workers:
        raise RigError("command line", "--slurm-workers", "and --remote-workers both name the remote workers",
                       "pass one: --slurm-workers N starts them as a Slurm job, --remote-workers N waits for yours")
    return loadtest(args.recipe, args.scenario, LoadOptions.of(args), args.duration, args.slurm_workers or args.remote_workers,
                    args.master_bind, url=args.url, model=args.model, boot_id=args.boot_id, flush_cache=args.flush_cache,
                    port=args.port, verbose=args.verbose, slurm_workers=bool(args.slurm_workers))


def cmd_sweep(args: argparse.Namespace) -> int:
    from rig.loadrun.sweep import sweep

    return sweep(args.recipe, args.scenario, args.rates, args.concurrency, args.goodput, args.slo_share, LoadOptions.of(args),
                 args.duration, url=args.url, model=args.model)


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rig.load.peers import export_run

    for path in export_run(Path(args.run), args.format, Path(args.out) if args.out else None):
        print(f"wrote {path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rig.load.peers import import_file

    if (args.compare is None) != (args.arm is None) or (args.block is not None and args.compare is None):
        raise RigError("command line", "--compare/--arm/--block", "--compare and --arm go together (--block only with them)",
                       "e.g. --compare results/compare/20261201-101010 --arm before")
    if args.compare is None:
        import_file(Path(args.file), args.scenario, Path(args.out) if args.out else None)
        return Exit.OK
    from rig.compare.imported import import_into

    import_into(Path(args.compare), Path(args.file), args.arm, args.scenario, args.block, Path(args.out) if args.out else None)
    return Exit.OK


def _served_elsewhere(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("recipe", nargs="?", help="recipe[:variant]; optional with --url")
    p.add_argument("--url", type=url, help=f"{what} a server rig did not start (e.g. one from plain `docker compose up`)")
    p.add_argument("--model", type=identity("served model name"),
                   help="with --url: the served model name (default: the first in /v1/models)")


def _loadtest_arguments(p: argparse.ArgumentParser) -> None:
    _served_elsewhere(p, "measure")
    p.add_argument("--boot-id", type=identity("boot identity"),
                   help="with --url: the server's boot identity, when rig cannot read it from the server")
    p.add_argument("--flush-cache", action="store_true", help="empty the engine's prefix cache before each run")
    p.add_argument("--scenario", action="append", help="scenario name (repeatable); default: prose-c1, code-c1 and c3000, "
                   "where a run the client cannot measure on this machine is named as skipped instead of failing")
    p.add_argument("--remote-workers", type=count(0, 4096), default=0,
                   help="distributed scenarios also wait for this many Locust workers on other client machines")
    p.add_argument("--slurm-workers", type=count(0, 4096), default=0, help="distributed scenarios also start this many "
                   "Locust workers as a Slurm job, one per client node (RIG_SLURM_PARTITION, ...)")
    p.add_argument("--master-bind", default="127.0.0.1",
                   help="address the Locust master listens on (remote workers need a reachable one)")
    no_keep_text(p)


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    from rig.load.goodput import SLO_FORMAT

    _served_elsewhere(p, "sweep")
    p.add_argument("--scenario", required=True,
                   help="scenario name or .yaml file (open_loop for --rates, a closed loop for --concurrency)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rates", help="request rates (req/s) of an open_loop scenario, e.g. 1,2,4,8")
    load.add_argument("--concurrency", help="users of a closed-loop or multi-turn scenario, e.g. 1,4,16,64")
    p.add_argument("--goodput", help=f"SLOs a request must meet: {SLO_FORMAT}")
    p.add_argument("--slo-share", type=amount(0, 1), default=0.9,
                   help="share of requests that must meet the SLOs at the knee (default 0.9)")


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory (holding summary.json and records-*.jsonl)")
    p.add_argument("--format", required=True, choices=["vllm", "aiperf"], help="vLLM's result JSON or AIPerf's profile export")
    p.add_argument("--out", help="directory to write into (default: the run directory)")


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="vLLM `--save-result --save-detailed` JSON, or AIPerf profile_export.jsonl")
    p.add_argument("--scenario", help="the rig scenario it corresponds to (its kind picks the headline; default prose-c1)")
    p.add_argument("--out", help="run directory to create (default: results/imported/<timestamp>/<scenario>)")
    p.add_argument("--compare", help="also add it as a boot of this results/compare/<timestamp> directory (with --arm)")
    p.add_argument("--arm", help="with --compare: the arm the imported run belongs to")
    p.add_argument("--block", type=int, help="with --compare: the ABBA block it pairs with (default: a new block)")


COMMANDS = [
    Command("loadtest", cmd_loadtest, "Locust load test against a recipe's server (boots it if it is not up)",
            "Run Locust scenarios against the recipe's server (booted for the test when nothing is up, and stopped after) "
            "or any OpenAI-compatible server (--url). Each scenario's first run after a boot is its warmup. The output "
            "leads with which runs may be used; the brief table follows; summary.md holds every column and note.",
            ("rig loadtest tiny-cpu", "rig loadtest tiny-cpu --scenario c3000 --duration 30",
             "rig loadtest --url http://127.0.0.1:8000 --scenario prose-c1"),
            _loadtest_arguments, shared=(size_and_workers, window, boot_port, verbose)),
    Command("sweep", cmd_sweep, "one scenario at a series of loads: throughput, goodput and latency vs load, and the knee",
            "Run one scenario at each load in turn on one boot and find the knee: the highest load whose requests still "
            "meet the SLOs (--goodput) in the share asked for.",
            ("rig sweep tiny-cpu --scenario prose-c1 --concurrency 1,2,4",
             "rig sweep tiny-cpu --scenario open-loop --rates 1,2,4 --goodput ttft<=2s,tpot<=50ms"),
            _sweep_arguments, shared=(size_and_workers, window)),
    Command("export", cmd_export, "a run directory as vLLM's result JSON or AIPerf's profile export, for their dashboards",
            "Write a rig run in another tool's format, so its dashboards can read it.",
            ("rig export results/tiny-cpu/<timestamp>/prose-c1 --format vllm",), _export_arguments),
    Command("import", cmd_import, "a vLLM result JSON or AIPerf profile_export.jsonl as a rig run (provenance marked)",
            "Read another tool's run as a rig run (marked as imported; rig did not check its client), and optionally add "
            "it as a boot of a comparison.",
            ("rig import vllm-result.json --scenario prose-c1",), _import_arguments),
]
