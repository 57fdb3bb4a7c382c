"""rig's command line, the parts every subcommand shares: the parser that answers a usage error in
one line, the grammars of its argument values (a number, a URL or a glob is refused by argparse
itself: exit 2, one line), the option groups several commands take, and `Command`, the declaration
of one subcommand (rig.cli.COMMANDS lists them). Standard library, rig.load.bounds and rig.compare.design only:
`rig --help` stays cheap."""

from __future__ import annotations

import argparse
import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

Handler = Callable[[argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]
WIDTH = 100  # the description's wrap (RawDescriptionHelpFormatter keeps the examples' lines as written)


@dataclass(frozen=True)
class Command:
    """One subcommand, `rig NAME`: adding a command is one entry in rig.cli.COMMANDS."""

    name: str
    handler: Handler | None  # None: a command of subcommands only (`rig adapters list`)
    summary: str  # its line in the parent's --help
    description: str  # the first paragraph of its own --help
    examples: tuple[str, ...]  # command lines a user can paste, shown under "examples:"
    arguments: Arguments = lambda parser: None
    shared: tuple[Arguments, ...] = ()  # option groups declared once and taken by several commands
    subcommands: tuple[Command, ...] = ()


def add_command(sub: argparse._SubParsersAction, command: Command) -> argparse.ArgumentParser:
    """The command's parser under `sub`: its description, its arguments and the examples after them."""
    epilog = "examples:\n" + "\n".join(f"  {example}" for example in command.examples)
    parser = sub.add_parser(command.name, help=command.summary, description=textwrap.fill(command.description, WIDTH),
                            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    command.arguments(parser)
    for group in command.shared:
        group(parser)
    if command.subcommands:
        nested = parser.add_subparsers(dest=f"{command.name}_command", required=True, parser_class=OneLineParser,
                                       metavar="COMMAND")
        for subcommand in command.subcommands:
            add_command(nested, subcommand)
    if command.handler is not None:
        parser.set_defaults(func=command.handler)
    return parser


def walk(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) of the parser and of every subcommand below it, depth first."""
    found = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # an alias would list a parser twice
                found += walk(child)
    return found


# ---- option groups several commands take, each declared once ----

RECIPE_HELP = "a recipe name (recipes/<name>.yaml), or name:variant; `rig validate` lists them"


def recipe_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help=RECIPE_HELP)


def no_keep_text(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-keep-text", action="store_true", help="keep no output text in the records (only hashes); "
                        "the coherence checks then have nothing to read")


def keep_text(args: argparse.Namespace) -> None:
    """--no-keep-text, for every run this command makes (they read it from the environment)."""
    if args.no_keep_text:
        import os

        from rig.loadrun.runner import KEEP_TEXT_ENV

        os.environ[KEEP_TEXT_ENV] = "0"


@dataclass(frozen=True)
class LoadOptions:
    """--small/--full and --workers as one value (size_and_workers declares them; `of` reads them)."""

    small: bool | None = None  # scaled-down sizes; None: the recipe's default
    workers: int | None = None  # Locust worker processes for distributed scenarios; None: cores - 1

    @classmethod
    def of(cls, args: argparse.Namespace) -> LoadOptions:
        return cls(small=args.small, workers=args.workers)

    def sized(self, recipe_default: bool) -> bool:
        """--small or --full where given, else the recipe's own default (small for a CPU recipe)."""
        return recipe_default if self.small is None else self.small


def size_and_workers(parser: argparse.ArgumentParser) -> None:
    """--small/--full set `small` (True, False, or None: the recipe's default) and --workers."""
    from rig.load.bounds import MAX_WORKERS

    size = parser.add_mutually_exclusive_group()
    size.add_argument("--small", dest="small", action="store_const", const=True, default=None,
                      help="scaled-down sizes (default for native recipes)")
    size.add_argument("--full", dest="small", action="store_const", const=False,
                      help="full sizes (default for GPU recipes)")
    parser.add_argument("--workers", type=count(1, MAX_WORKERS),
                        help="Locust worker processes for distributed scenarios (default: cores - 1)")


def boot_port(parser: argparse.ArgumentParser) -> None:
    """--port: where the boots a command starts listen. Never part of a saved plan, so a resumed
    comparison or race may take another."""
    parser.add_argument("--port", type=count(1, 65535), help="the port every boot this command starts listens on "
                        "(default: the recipe's serving.port); not part of a saved plan, so a resumed run may take another")


def window(parser: argparse.ArgumentParser) -> None:
    """--duration: every measured window, in the scenarios' own bounds (window_seconds)."""
    from rig.compare.design import DEFAULT_ROUND_S

    parser.add_argument("--duration", type=window_seconds, help="every measured window, seconds, at least: the window "
                        "opens at the steady state, which may come before the time planned for it (default: each "
                        f"scenario's own; a round of rig compare or rig tune at full sizes: {DEFAULT_ROUND_S:g})")


def verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every table, note and progress line as it runs (the result files hold them either way)")


# ---- argument grammars ----

def count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value
    return parse


def amount(low: float, high: float) -> Callable[[str], float]:
    """A finite number in (low, high]: never NaN or an infinity."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not low < value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not a number in ({low:g}, {high:g}]")
        return value
    return parse


def window_seconds(text: str) -> float:
    """A measurement window's length, in the scenarios' own bounds (rig.load.bounds)."""
    from rig.load.bounds import MAX_DURATION_S, MIN_DURATION_S

    value = amount(0, MAX_DURATION_S)(text)
    if value < MIN_DURATION_S:
        raise argparse.ArgumentTypeError(f"{text} s is shorter than the shortest window rig measures ({MIN_DURATION_S:g} s)")
    return value


def url(text: str) -> str:
    """http(s)://host[:port][/path] of a server to measure; anything else is refused before it is dialled."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(ord(c) < 33 or ord(c) == 127 for c in text) \
            or len(text) > 2048 or (port is not None and not 1 <= port <= 65535):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s)://host[:port] URL")
    return text


def boot_of_results(text: str) -> str:
    """A boot id as rig writes them (results/boots/<id>): one path component, never a path that leads elsewhere."""
    from rig.boot.record import BOOT_ID

    if not BOOT_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a boot id (like 20261201-135107-llama8b-h200-0b2b; see results/boots/)")
    return text


def identity(what: str) -> Callable[[str], str]:
    """A name that is recorded and sent as it is (a served model, a server's boot identity): 1-256
    visible characters, no whitespace or control character."""
    def parse(text: str) -> str:
        if not re.fullmatch(r"[!-~]{1,256}", text):
            raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a {what} (1-256 visible ASCII characters, no spaces)")
        return text
    return parse


def fingerprint_glob(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.*?\[\]-]{1,200}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a fingerprint field or glob (letters, digits, _ . - * ? [ ])")
    return text


def counts(low: int, high: int) -> Callable[[str], str]:
    """A comma-separated list of whole numbers (kept as the text the handler splits), at most 64 of them."""
    one = count(low, high)

    def parse(text: str) -> str:
        parts = text.split(",")
        if not 1 <= len(parts) <= 64:
            raise argparse.ArgumentTypeError(f"{len(parts)} values: give 1 to 64")
        for part in parts:
            one(part.strip())
        return text
    return parse


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, like every other bad input: what was wrong and where the help is."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("rig").strip()  # "rig: loadtest: argument --duration: ...", like every rig error
        self.exit(2, f"rig: {command + ': ' if command else ''}{' '.join(message.split())}; fix: see `{self.prog} --help`\n")
