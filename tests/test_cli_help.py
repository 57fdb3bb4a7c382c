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


SHARED = {"--small": "size_and_workers", "--full": "size_and_workers", "--workers": "size_and_workers",
          "--port": "boot_port", "--duration": "window"}


def test_shared_options_are_declared_once_in_cli_args():
    """--small/--full, --workers, --port and --duration are declared in rig.cli_args alone: a command
    takes them as an option group (Command.shared), so their grammar and help are one text."""
    import ast

    declared: dict[str, list[str]] = {}
    for path in sorted((REPO / "rig").rglob("*.py")):
        if path.parent.name == "testing":  # the test servers' own command lines, not rig's
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and arg.value in SHARED:
                        declared.setdefault(arg.value, []).append(str(path.relative_to(REPO)))
    assert declared == {option: ["rig/cli_args.py"] for option in SHARED}


@pytest.mark.parametrize("option", sorted({"--port", "--duration"}))
def test_port_and_duration_read_the_same_in_every_command_that_takes_them(option):
    found = {prog: action for prog, parser in SUBCOMMANDS for action in parser._actions if option in action.option_strings}
    assert len(found) >= 4, found.keys()
    assert len({(action.help, action.type.__qualname__, action.dest) for action in found.values()}) == 1, found.keys()
    good, bad = ("8400", "0") if option == "--port" else ("12.5", "0.1")
    for prog, action in found.items():
        assert action.type(good) == (8400 if option == "--port" else 12.5), prog
        with pytest.raises(argparse.ArgumentTypeError):
            action.type(bad)


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


@pytest.mark.parametrize("word,fix", [
    ("tun", "did you mean tune?"),
    ("compre", "did you mean compare?"),
    ("validation", "claims are recomputed by `python -m rig.validation`"),
    ("zzz", "see `rig --help`"),
])
def test_a_word_that_names_no_command_gets_the_command_it_is_close_to(word, fix, capsys):
    assert main([word, "tiny-cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is not a rig command; fix: {fix}" in err
