"""`rig`: the host CLI. recipe -> render -> build -> boot -> load -> compare -> report."""

from __future__ import annotations

import argparse
import sys

from rig.cli import compare, engine, load, recipes, serving
from rig.cli.signals import handle_termination, hold_interrupts, received, stopped_by_signal
from rig.cli_args import Command, OneLineParser, add_command
from rig.errors import RigError, StepFailed, closest
from rig.exits import Exit, help_text

# `rig NAME` is one entry of COMMANDS; each family's module declares its own, in the flow's order.
COMMANDS = [*recipes.COMMANDS, *serving.COMMANDS, *load.COMMANDS, *compare.COMMANDS, *engine.COMMANDS]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rig", description=__doc__, epilog=help_text(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")

    for command in walk_commands():
        add_command(sub, command)
    return parser


def walk_commands() -> list[Command]:
    """Every `rig` command, in the order `rig --help` lists them."""
    from rig.hosts.command import COMMANDS as HOST_COMMANDS
    from rig.tune.command import COMMANDS as TUNE_COMMANDS

    return COMMANDS + HOST_COMMANDS + TUNE_COMMANDS


def installation_problem() -> str | None:
    """rig runs from its checkout (recipes, scenarios, the locustfile and the adapter package live
    there): a copy installed elsewhere (`pip install .` without -e) has none of them."""
    import importlib.util

    from rig.paths import REPO_ROOT

    fix = "install rig editable from its checkout: pip install -e . -e ./adapter (or `make setup`)"
    if not (REPO_ROOT / "recipes").is_dir() or not (REPO_ROOT / "loadtests").is_dir():
        return f"{REPO_ROOT}: no recipes/ or loadtests/ beside the rig package (rig runs from its checkout); fix: {fix}"
    if importlib.util.find_spec("rig_adapters") is None:
        return f"rig_adapters: the adapter package is not installed; fix: {fix}"
    return None


# What a user may type for a job that is not a `rig` command: where that job lives.
ELSEWHERE = {
    "validation": "claims are recomputed by `python -m rig.validation` (make evidence); `rig validate` checks recipes",
    "evidence": "claims are recomputed by `python -m rig.validation` (make evidence)",
    "test": "the tests run with `make test` (make test-fast: unit tests only)",
}


def unknown_command(argv: list[str], names: list[str]) -> str | None:
    """One line for a first word that names no command: the command it is close to, or where its
    job lives. None when it is a command or an option (argparse reads those)."""
    if not argv or argv[0].startswith("-") or argv[0] in names:
        return None
    word = argv[0]
    if word in ELSEWHERE:
        return f"{word} is not a rig command; fix: {ELSEWHERE[word]}"
    close = closest(word, names)
    return f"{word[:40]!r} is not a rig command; fix: " + (f"did you mean {close}?" if close else "see `rig --help`")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    if problem := unknown_command(words, [c.name for c in walk_commands()]):
        print(f"rig: {problem}", file=sys.stderr)
        return Exit.BAD_INPUT
    args = parser.parse_args(argv)
    received.clear()
    handle_termination()
    problem = installation_problem()
    if problem:
        print(f"rig: {problem}", file=sys.stderr)
        return Exit.BAD_INPUT
    from rig.boot.base import BootFailed

    try:
        code = args.func(args)
        if code == Exit.INTERRUPTED:
            hold_interrupts()
        # an interrupt a load run caught and wrote up (its command returns INTERRUPTED): which signal
        return stopped_by_signal() if code == Exit.INTERRUPTED and received else code
    except StepFailed as error:
        print(f"rig: {error}", file=sys.stderr)
        return Exit.FAILED
    except RigError as error:
        print(f"rig: {error}", file=sys.stderr)
        return Exit.BAD_INPUT
    except BootFailed as error:  # already one line: what failed and where its log is
        print(f"rig: {error}", file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:  # Terminated, or an interrupt re-raised after a load run caught it
        hold_interrupts()
        if received:
            return stopped_by_signal()
        print("rig: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except OSError as error:  # a full disk, a permission, a path that is a file, a connection: one line, no traceback
        where = error.filename if getattr(error, "filename", None) else "(system)"
        problem = error.strerror or str(error) or type(error).__name__
        print(f"rig: {where}: {problem}; fix: free space, fix the permissions or the path, or check the server it names",
              file=sys.stderr)
        return Exit.FAILED

