"""What the documents promise exists: every repository path README.md, benchmarks/RESULTS.md, the
runbooks and rig's docstrings cite is a committed file or folder, and every command in README.md's
code blocks parses (`rig ...` through rig's own parser, a `make` target the Makefile defines, a
script or test file that exists, a recipe or compose file that is there), without running it."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

DOCUMENTS = ["README.md", "benchmarks/RESULTS.md", "benchmarks/h200/README.md", "tests/oracles/README.md",
             "tests/standins/README.md", "benchmarks/sglang-feasibility.md"]
# A path: folders and a file name with one of these endings, as the documents write them.
PATH = re.compile(r"(?<![\w./~<>-])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.*-]+\.(?:md|sh|py|yaml|yml|json|txt|png|xz|toml|lock))\b")
# Paths that are not the repository's: run outputs, other checkouts, engine sources, placeholders.
FOREIGN = re.compile(r"^(results/|\.rig/|\.gpu/|\.venv/|\.\./|/|~|[a-z_]+/srt/|sglang/|vllm/|flashinfer/|transformers/|b12x/|"
                     r"torch/|site-packages/|compose/[a-z0-9-]+\.spark|boots/|runs/|round-|rig-results/|session-[abc]/)|[<>*]|NAME|RECIPE")


def _tracked() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return set(files) | {str(Path(f).parent) for f in files}


TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".git")}


def _cited(text: str) -> set[str]:
    """Repository paths: their first part is a top-level entry of the checkout (benchmarks' own
    folders, written without `benchmarks/`, count too); an engine's or a peer's paths do not."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        first = path.split("/", 1)[0]
        if FOREIGN.search(path) or (first not in TOP and not (REPO / "benchmarks" / first).exists()):
            continue
        found.add(path)
    return found


def _docstrings() -> dict[str, str]:
    out = {}
    for path in sorted((REPO / "rig").rglob("*.py")) + sorted((REPO / "adapter" / "rig_adapters").rglob("*.py")):
        tree = ast.parse(path.read_text())
        texts = [ast.get_docstring(node) or "" for node in ast.walk(tree)
                 if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        out[str(path.relative_to(REPO))] = "\n".join(texts)
    return out


def test_every_path_the_documents_and_docstrings_cite_exists():
    tracked = _tracked()
    missing = []
    sources = {name: (REPO / name).read_text() for name in DOCUMENTS} | _docstrings()
    for source, text in sources.items():
        for path in _cited(text):
            if path not in tracked and f"benchmarks/{path}" not in tracked and not any(t.startswith(path) for t in tracked):
                missing.append(f"{source}: {path}")
    assert missing == [], missing


def test_the_path_finder_finds_paths():
    assert _cited("see `benchmarks/h200/README.md` and rig/compare/run.py, not results/compare/x/plan.json") == {
        "benchmarks/h200/README.md", "rig/compare/run.py"}


def _readme_commands() -> list[str]:
    commands, inside = [], False
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        line = line.split("  #", 1)[0].split(" # ", 1)[0].strip()
        if inside and re.match(r"^(rig|make|python3|docker compose|bash) ", line):
            commands.append(line)
    return commands


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.M))


COMMANDS = _readme_commands()


def test_readme_has_commands_to_check():
    assert len(COMMANDS) > 20


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_in_the_readme_parses(command):
    from rig.cli import build_parser
    from rig.deploy.recipe import split_ref

    words = shlex.split(command.replace("<ip>", "127.0.0.1").replace("<node0>", "127.0.0.1"))
    if words[0] == "rig":
        parser = build_parser()
        try:
            args = parser.parse_args(words[1:])
        except SystemExit as error:
            pytest.fail(f"{command!r} does not parse (exit {error.code})")
        recipe = getattr(args, "recipe", None)
        if recipe:
            assert (REPO / "recipes" / f"{split_ref(recipe)[0]}.yaml").exists(), command
    elif words[0] == "make":
        target = words[1]
        assert target in _make_targets(), f"{command!r}: no make target {target!r}"
        positional = [w for w in words[2:] if "=" not in w]
        for ref in positional:
            assert (REPO / "recipes" / f"{ref.split(':')[0]}.yaml").exists(), command
    elif words[:2] == ["docker", "compose"]:
        assert (REPO / words[words.index("-f") + 1]).exists(), command
    elif words[0] in ("python3", "bash"):
        files = [w for w in words[1:] if "/" in w and not w.startswith("-")]
        assert files and all((REPO / f).exists() for f in files), command
