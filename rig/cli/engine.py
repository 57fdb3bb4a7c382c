"""`rig audit`, `rig kernelbench` and `rig adapters`: what a recipe's engine runs, before and beside a boot."""

from __future__ import annotations

import argparse

from rig.cli_args import (
    Command,
    boot_of_results,
    count,
    counts,
)
from rig.errors import RigError


def cmd_audit(args: argparse.Namespace) -> int:
    from rig.audit.command import audit

    return audit(args.recipe, args.model_dir, args.json, args.boot)


def cmd_kernelbench(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        from rig.kernelbench.command import default_backends, kernelbench
    except ImportError as error:  # torch is the kernelbench extra, not part of rig's core
        raise RigError("rig kernelbench", error.name or "torch", "is not installed",
                       "pip install 'rig[kernelbench]' (make setup installs it)") from None

    kernelbench(args.n, args.k, args.pad_k, [int(m) for m in args.m.split(",")],
                args.backends.split(",") if args.backends else default_backends(), args.production, args.candidate,
                args.calls_per_step, args.rounds, Path(args.out) if args.out else None, args.device)
    return 0


def cmd_adapters(args: argparse.Namespace) -> int:
    if args.adapters_command == "check":
        from rig.drift import run_check

        return run_check(args.recipes, image=args.image)
    from rig.adapters_table import print_table

    print_table(as_json=args.json)
    return 0


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", help="a recipe name (its model's dimensions and its parallelism)")
    p.add_argument("--model-dir", help="read config.json from this checkpoint instead of the shipped dimensions")
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    p.add_argument("--boot", type=boot_of_results, help="a boot id (results/boots/): hold the derived shapes against what "
                   "that boot's engine allocated on every rank (the gemm_shapes instrument)")


def _kernelbench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=count(1, 1 << 20), default=5120, help="the GEMM's N: output features (default 5120)")
    p.add_argument("--k", type=count(1, 1 << 20), default=576, help="the GEMM's K as the model has it (default 576)")
    p.add_argument("--pad-k", type=count(1, 1 << 20), default=640, help="K zero-padded to this (default 640)")
    p.add_argument("--m", type=counts(1, 1 << 20), default="6", help="comma-separated M values: tokens per call (default 6)")
    p.add_argument("--backends", help="comma-separated backends to time beside the production one (default: all registered)")
    p.add_argument("--production", default="torch-fp8-rowwise", help="the backend serving today, at K (default torch-fp8-rowwise)")
    p.add_argument("--candidate", help="the backend the padding unlocks, at the padded K (e.g. flashinfer-mxfp8-b12x)")
    p.add_argument("--calls-per-step", type=count(1, 10_000), default=1,
                   help="GEMM calls per model step, for the ms-per-step column (default 1)")
    p.add_argument("--rounds", type=count(1, 10_000), default=20, help="interleaved timing rounds (default 20)")
    p.add_argument("--device", help="a torch device (default: cuda when there is one, else cpu)")
    p.add_argument("--out", help="directory for kernelbench.json (default: none written)")


def _adapters_list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the registry as JSON")


def _adapters_check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipes", nargs="*", help="recipes whose pinned engine to check (default: every recipe)")
    p.add_argument("--image", help="check inside this built image instead (needs a Docker engine)")


COMMANDS = [
    Command("audit", cmd_audit, "GEMM shapes per rank against backend constraints, before any boot",
            "Derive every GEMM shape each rank runs from the recipe's model and parallelism, and hold each against the "
            "constraints of the kernel backends the engine may pick.",
            ("rig audit mia-tp4", "rig audit mia-tp4 --json"), _audit_arguments),
    Command("kernelbench", cmd_kernelbench, "GEMM benchmark: cold L2, CUDA graphs, interleaved rounds, bitwise check",
            "Time one GEMM shape per backend (cold L2, CUDA graphs, interleaved rounds) at K and at the padded K, and "
            "check that the padding is lossless bit for bit. Needs torch (the kernelbench extra).",
            ("rig kernelbench --n 5120 --k 576 --pad-k 640 --m 6 --candidate flashinfer-mxfp8-b12x --calls-per-step 43",),
            _kernelbench_arguments),
    Command("adapters", cmd_adapters, "the adapter registry and its drift matrix",
            "The runtime adapters rig can arm in an engine, and whether every hook target still exists in the engine "
            "version a recipe pins.",
            ("rig adapters list", "rig adapters check mia-tp4"),
            subcommands=(
                Command("list", None, "print the registry", "Print every adapter: its gate, its engines and recipes, and "
                        "its hook targets.",
                        ("rig adapters list --json",), _adapters_list_arguments),
                Command("check", None, "verify every hook target against the engine a recipe pins",
                        "Verify every adapter's hook targets statically against the engine source a recipe pins (its "
                        "release wheel, cached), or inside a built image with --image: the drift matrix.",
                        ("rig adapters check mia-tp4",), _adapters_check_arguments),
            )),
]
