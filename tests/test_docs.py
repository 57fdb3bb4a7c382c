"""What the documents promise exists. README.md, every page of docs/ and the test folders' READMEs
(DOCUMENTS) and rig's docstrings cite only repository paths that are committed (or about to be: in
the working tree and not ignored); every relative link of a document reaches a file, and its anchor
a heading there; and every command in a document's shell code blocks parses, without running it:
`rig ...` through rig's own parser, a `make` target and variables the Makefile defines, a compose
file and profile that exist, a Python module that imports or a script or test file that exists (the
system's own tools, SYSTEM_TOOLS, are left to the path test)."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import REPO

DOCUMENTS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")),
             "tests/oracles/README.md", "tests/standins/README.md"]
README_MAX_LINES = 120  # what a newcomer reads in five minutes; the rest lives in docs/
# A path: folders and a file name with one of these endings, as the documents write them.
PATH = re.compile(r"(?<![\w./~<>-])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.*-]+\.(?:md|sh|py|yaml|yml|json|txt|png|xz|toml|lock))\b")
# Paths that are not the repository's: run outputs, other checkouts, engine sources, placeholders.
FOREIGN = re.compile(r"^(results/|\.rig/|\.gpu/|\.venv/|\.bundle/|\.packs/|\.\./|/|~|[a-z_]+/srt/|sglang/|vllm/|flashinfer/|transformers/|b12x/|"
                     r"torch/|site-packages/|compose/[a-z0-9-]+\.spark|boots/|runs/|round-|rig-results/)|[<>*]|NAME|RECIPE")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# The system's own tools a page may show between rig's commands; the repository paths they name are
# held by the path test like any other citation.
SYSTEM_TOOLS = {"cd", "cp", "mv", "mkdir", "ls", "cat", "tar", "git", "scp", "rsync", "ssh", "sha256sum", "curl", "docker",
                "nvidia-smi", "kubectl"}


def _repository_files() -> set[str]:
    """Committed files and the ones a commit may add (untracked, not ignored), with their folders."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    return set(listed) | {str(parent) for f in listed for parent in Path(f).parents if str(parent) != "."}


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


def test_the_documents_are_the_readme_and_the_docs_pages():
    assert "docs/README.md" in DOCUMENTS and len(DOCUMENTS) >= 8, DOCUMENTS


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_every_path_the_documents_and_docstrings_cite_exists():
    files = _repository_files()
    missing = []
    sources = {name: (REPO / name).read_text() for name in DOCUMENTS} | _docstrings()
    for source, text in sources.items():
        for path in _cited(text):
            if path not in files and f"benchmarks/{path}" not in files and not any(t.startswith(path) for t in files):
                missing.append(f"{source}: {path}")
    assert missing == [], missing


def test_the_path_finder_finds_paths():
    assert _cited("see `docs/recipes.md` and rig/compare/run.py, not results/compare/x/plan.json") == {
        "docs/recipes.md", "rig/compare/run.py"}


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in path.read_text().splitlines() if re.match(r"#{1,6} ", line)}


def test_the_anchor_is_githubs():
    assert _anchor(" The client's bounds and verdicts") == "the-clients-bounds-and-verdicts"
    assert _anchor("Bare metal (native driver)") == "bare-metal-native-driver"


def test_every_relative_link_reaches_a_file_and_its_heading():
    broken = []
    for name in DOCUMENTS:
        document = REPO / name
        for target in LINK.findall(document.read_text()):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            linked = (document.parent / file).resolve() if file else document
            if not linked.exists():
                broken.append(f"{name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{name}: {target} (no such heading)")
    assert broken == [], broken


def _shell_lines(text: str) -> list[str]:
    """The command lines of a document's shell code blocks: comments dropped, continuations joined."""
    lines, fence, pending = [], None, ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("```"):
            fence = raw.strip()[3:].strip() if fence is None else None
            continue
        if fence not in SHELL_FENCES or fence is None:
            continue
        line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].rstrip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line, pending = (pending + line.strip()).strip(), ""
        if line:
            lines.append(line)
    return lines


COMMANDS = [(name, line) for name in DOCUMENTS for line in _shell_lines((REPO / name).read_text())]


def test_the_shell_reader_reads_commands():
    text = "```sh\nrig up tiny-cpu   # boots it\n\n   # a note\nmake compare \\\n  ARMS=x\n```\n```yaml\nrig: 1\n```\n"
    assert _shell_lines(text) == ["rig up tiny-cpu", "make compare ARMS=x"]


def test_the_documents_have_commands_to_check():
    assert len(COMMANDS) > 20 and any(name == "README.md" for name, _ in COMMANDS)


def _makefile() -> str:
    return (REPO / "Makefile").read_text()


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", _makefile(), flags=re.M))


def _recipe_exists(ref: str) -> bool:
    return (REPO / "recipes" / f"{ref.split(':')[0]}.yaml").exists()


def _check_rig(command: str, words: list[str]) -> None:
    from rig.cli import build_parser

    try:
        args = build_parser().parse_args(words)
    except SystemExit as error:
        pytest.fail(f"{command!r} does not parse (exit {error.code})")
    refs = [getattr(args, "recipe", None)] + list(getattr(args, "recipes", None) or [])
    for ref in filter(None, refs):
        assert ref.endswith(".yaml") or _recipe_exists(ref), f"{command!r}: no recipe {ref!r}"
    if words[0] in ("compare", "tune"):  # a recipe name; its variants are arms (or an axis of the space)
        assert ":" not in args.recipe, f"{command!r}: {words[0]} takes a recipe name, not {args.recipe!r}"
    if words[0] == "compare":
        from rig.compare.arms import parse_arm
        from rig.deploy.recipe import load

        for spec in list(args.arm or []) + ([args.control] if args.control else []):
            variant = parse_arm(spec).variant
            if variant:
                load(f"{args.recipe}:{variant}")  # raises on a variant the recipe lacks


STEP_SCRIPT = "benchmarks/gpu-host/step.sh"


def _check_make(command: str, words: list[str]) -> None:
    assert words and words[0] in _make_targets(), f"{command!r}: no make target {words[:1]}"
    for word in words[1:]:
        name, equals, value = word.partition("=")
        if equals:
            assert re.search(rf"\$\({name}\)|^{name} \?=", _makefile(), flags=re.M), f"{command!r}: make reads no {name}"
            if name == "RECIPE":
                assert _recipe_exists(value), command
        else:
            assert _recipe_exists(word), f"{command!r}: no recipe {word!r}"


def _check_compose(command: str, words: list[str]) -> None:
    file = REPO / words[words.index("-f") + 1]
    assert file.exists(), command
    if "--profile" in words:
        services = yaml.safe_load(file.read_text())["services"].values()
        profiles = {p for service in services for p in service.get("profiles", [])}
        assert words[words.index("--profile") + 1] in profiles, f"{command!r}: no such profile"


def _check_python(command: str, words: list[str]) -> None:
    if words[:1] == ["-m"]:
        module, rest = words[1], words[2:]
        assert importlib.util.find_spec(module) is not None, f"{command!r}: no module {module}"
        if module == "pip":
            extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            for target in (w for i, w in enumerate(rest) if i and rest[i - 1] == "-e"):
                folder, _, extra = target.partition("[")
                assert (REPO / folder).is_dir() and (not extra or extra.rstrip("]") in extras), command
            return
        words = rest
    # the script, and the repository paths among its arguments (outputs, /tmp and build folders are not)
    files = [w for i, w in enumerate(words) if not w.startswith("-") and ("/" in w or w.endswith(".py"))
             and (i == 0 or not FOREIGN.search(w))]
    assert all((REPO / f).exists() for f in files), f"{command!r}: a file it names is missing"


def _check_venv_file(command: str, path: str) -> None:
    """`.venv/...` is what `make setup` creates: checked in the environment these tests run in."""
    assert path.startswith(".venv/") and (Path(sys.prefix) / path.removeprefix(".venv/")).exists(), command


@pytest.mark.parametrize(("document", "command"), COMMANDS, ids=[f"{d}: {c[:60]}" for d, c in COMMANDS])
def test_every_command_in_the_documents_parses(document, command):
    words = shlex.split(command)
    if words[0] == "export":
        assert all(ASSIGNMENT.match(w) for w in words[1:]), command
        return
    while words and (ASSIGNMENT.match(words[0]) or words[0] == "sudo"):  # NAME=value or sudo before the command
        words = words[1:]
    head = words[0]
    if head.startswith(".venv/bin/"):
        _check_venv_file(command, head)
        head = head.removeprefix(".venv/bin/")
    if head in (".", "source"):
        if words[1].startswith(".venv/"):
            _check_venv_file(command, words[1])
        else:
            assert (REPO / words[1]).is_file(), command
    elif head == "rig":
        _check_rig(command, words[1:])
    elif head == "make":
        _check_make(command, words[1:])
    elif words[:2] == ["docker", "compose"]:
        _check_compose(command, words)
    elif head in ("python", "python3"):
        _check_python(command, words[1:])
    elif head == "pytest":
        _check_python(command, ["-m", "pytest", *words[1:]])
    elif head == "bash" or "/" in head:
        script, rest = (words[1], words[2:]) if head == "bash" else (head, words[1:])
        assert (REPO / script).is_file(), f"{command!r}: no script {script}"
        if script == STEP_SCRIPT and rest[:1] in (["compare"], ["run"]):  # step.sh KIND SECONDS -- RIG_ARGS
            assert rest[2:3] == ["--"], f"{command!r}: step.sh {rest[0]} SECONDS -- ARGS"
            _check_rig(command, (["compare"] if rest[0] == "compare" else []) + rest[3:])
    elif head not in SYSTEM_TOOLS:
        pytest.fail(f"{document}: {command!r}: not a command this test can check (rig, make, docker compose, python, "
                    "a script, or one of SYSTEM_TOOLS)")
