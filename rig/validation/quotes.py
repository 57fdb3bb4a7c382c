"""Figures quoted elsewhere, held to their claims.

The rule: a figure rig claims is quoted as a link to its claim, `[FIGURE](docs/validation.md#ID)` (any
relative path ending in `validation.md#ID`), in README.md, docs/*.md, recipes/*.yaml and every other
tracked text file. Such a link is correct when ID is a claim under validation/ and FIGURE, its text with
whitespace runs read as one space (and a YAML comment's `#` at a wrapped line's start dropped), is
character for character a value that claim prints: its own value, one of its measurements' figures,
or its id (a link to the claim that quotes no figure). Anything else is a problem: a figure the
evidence does not give, an anchor no claim has, a link with no text.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rig.validation.claims import Claim

TARGET = re.compile(r"\]\((?P<target>[^()\s]*validation\.md#(?P<anchor>[^)\s]*))\)")
SUFFIXES = (".md", ".yaml", ".yml", ".py", ".sh", ".toml", ".txt")
ALWAYS = ("README.md", "docs/*.md", "recipes/*.yaml")  # read even before they are tracked


@dataclass(frozen=True)
class QuoteProblem:
    source: str
    line: int
    quoted: str
    anchor: str
    problem: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: [{self.quoted}](...validation.md#{self.anchor}): {self.problem}"


def _link_text(text: str, close: int) -> str | None:
    """The text of the link whose `]` is at `close`: back to its matching `[` (brackets nest)."""
    depth = 0
    for index in range(close, -1, -1):
        if text[index] == "]":
            depth += 1
        elif text[index] == "[":
            depth -= 1
            if depth == 0:
                return text[index + 1:close]
    return None


def _normalised(quoted: str) -> str:
    return " ".join(part.strip().removeprefix("#").strip() for part in quoted.splitlines()).strip()


def quoted_figures(text: str, source: str, claims: dict[str, Claim]) -> list[QuoteProblem]:
    """Every link to a claim in `text` that breaks the rule (module docstring)."""
    problems = []
    for found in TARGET.finditer(text):
        close = found.start()
        line = text.count("\n", 0, close) + 1
        anchor = found.group("anchor")
        raw = _link_text(text, close)
        quoted = _normalised(raw) if raw is not None else ""
        claim = claims.get(anchor)
        if claim is None:
            problem = f"no claim {anchor!r} under validation/ (claims: {', '.join(sorted(claims))})"
        elif not quoted:
            problem = "a link to a claim quotes its figure (or its id) as the link's text"
        elif quoted != claim.id and quoted not in claim.printed():
            shown = ", ".join(sorted(claim.printed()))[:300]
            problem = f"{anchor} prints no figure {quoted!r} (it prints: {shown})"
        else:
            continue
        problems.append(QuoteProblem(source, line, quoted, anchor, problem))
    return problems


# The checker and its tests write the quote's form and counterexamples of it; they quote no claim.
DEFINING = ("validation/", "rig/validation/", "tests/test_validation")


def quoting_files(root: Path) -> list[Path]:
    """The tracked text files, and README.md, docs/*.md and recipes/*.yaml even before they are tracked."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False).stdout.decode().split("\0")
    files = {root / name for name in listed if name.endswith(SUFFIXES) and not name.startswith(DEFINING)}
    files |= {path for pattern in ALWAYS for path in root.glob(pattern)}
    return sorted(path for path in files if path.is_file())


def check_quotes(root: Path, claims: list[Claim]) -> list[QuoteProblem]:
    by_id = {claim.id: claim for claim in claims}
    problems = []
    for path in quoting_files(root):
        text = path.read_text(errors="replace")
        if "validation.md#" in text:
            problems += quoted_figures(text, str(path.relative_to(root)), by_id)
    return problems
