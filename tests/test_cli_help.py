"""Every subcommand's --help: a description line, help for each argument, and examples that parse;
the options several commands share are one declaration; a new command is one registration."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from rig import cli
from rig.cli import COMMANDS, build_parser, main
from rig.cli_args import Command, walk

REPO = Path(__file__).resolve().parent.parent
SUBCOMMANDS = [(prog, parser) for prog, parser in walk(build_parser()) if prog != "rig"]


def _examples(parser: argparse.ArgumentParser) -> list[str]:
    text = (parser.epilog or "").split("examples:\n", 1)
    return [line.strip() for line in text[1].splitlines() if line.strip()] if len(text) == 2 else []


def test_every_command_and_subcommand_is_walked():
    progs = {prog for prog, _ in SUBCOMMANDS}
    assert {f"rig {c.name}" for c in COMMANDS} <= progs and {"rig adapters list", "rig adapters check"} <= progs


@pytest.mark.parametrize("prog,parser", SUBCOMMANDS, ids=[prog for prog, _ in SUBCOMMANDS])
def test_a_subcommands_help_has_a_description_help_for_every_argument_and_an_example(prog, parser):
    assert parser.description and parser.description.strip(), f"{prog}: no description"
    missing = [action.dest for action in parser._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help]
    assert missing == [], f"{prog}: arguments without help: {missing}"
    examples = _examples(parser)
    assert any(f"{example} ".startswith(f"{prog} ") for example in examples), f"{prog}: no example of it in {examples}"
    assert "examples:" in parser.format_help()


@pytest.mark.parametrize("prog,parser", SUBCOMMANDS, ids=[prog for prog, _ in SUBCOMMANDS])
def test_every_example_parses_and_names_recipes_that_exist(prog, parser):
    """Every example that is a rig command line (others, such as what runs on another host, are shown
    beside them) parses, and the recipes it names exist."""
    for example in (e for e in _examples(parser) if e.startswith("rig ")):
        args = build_parser().parse_args(shlex.split(example, comments=True)[1:])
        for ref in [getattr(args, "recipe", None), *(getattr(args, "recipes", None) or [])]:
            if ref:
                assert (REPO / "recipes" / f"{ref.split(':')[0]}.yaml").exists(), f"{example!r}: no recipe {ref!r}"


@pytest.mark.parametrize("command", ["loadtest", "sweep", "compare"])
def test_small_full_and_workers_read_the_same_in_every_command_that_runs_load(command):
    """--small/--full set one value (True, False, or None: the recipe's default) and --workers is
    the same option in every command that runs load: one declaration (rig.cli_args.size_and_workers)."""
    required = {"loadtest": ["tiny-cpu"], "sweep": ["tiny-cpu", "--scenario", "prose-c1", "--concurrency", "1"],
                "compare": ["tiny-cpu", "--arm", "a:X=0", "--arm", "b:X=1"]}[command]
    parse = build_parser().parse_args
    assert parse([command, *required]).small is None and parse([command, *required, "--small"]).small is True
    assert parse([command, *required, "--full", "--workers", "3"]).small is False
    assert parse([command, *required, "--workers", "3"]).workers == 3
    with pytest.raises(SystemExit):
        parse([command, *required, "--small", "--full"])
    with pytest.raises(SystemExit):
        parse([command, *required, "--workers", "0"])


def test_a_new_command_is_one_registration(monkeypatch, capsys):
    def hello(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", help="who to greet")

    def greet(args: argparse.Namespace) -> int:
        print(f"hello {args.name}")
        return 3

    monkeypatch.setattr(cli, "COMMANDS", [*COMMANDS, Command("hello", greet, "greet someone", "Print a greeting.",
                                                              ("rig hello world",), hello)])
    assert main(["hello", "world"]) == 3 and capsys.readouterr().out == "hello world\n"
    help_text = dict(walk(build_parser()))["rig hello"].format_help()
    assert "Print a greeting." in help_text and "who to greet" in help_text and "rig hello world" in help_text
