"""rig's tracked files speak of rig, never of the place it was built in.

The scan reads every file `git ls-files` lists (text files only: a file with a NUL byte, one that is
not UTF-8, and .xz/.gz/.png and other archives or images are skipped) and fails on any line that
matches one of RULES, listing file:line:rule: text. Each rule's name says what it catches: the
machines, stretches of work, tools, budgets and paths of development; the projects rig started
from; issue numbers in prose; how a rule was found (reviews, findings). A GPU host is described by
what it is ("an air-gapped H200 host with Python 3.12 and torch 2.11"), a host that may vanish as
preemptible. Not caught: HTTP, Locust and process sessions, random seeds, colours, `#include`,
linked issue numbers, a GPU's own product name.

This file is scanned too: its patterns spell each word with a character class and its examples
with a '·' that the tests take out, so no line of it reads as the word itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SKIPPED_SUFFIXES = (".xz", ".gz", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".zip", ".tar", ".whl", ".zst", ".safetensors")

_I = re.IGNORECASE
_STRETCH = ("this|that|next|last|previous|earlier|later|each|every|one|another|same|current|whole|first|second|third|"
            "fourth|fifth|sixth|device|gpu|h100|h200|development|dev|working|work|helper")
RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("borrowed machine", re.compile(r"\bl[e]nt\b", _I)),
    ("stretch of work", re.compile(r"\bsitt[i]ngs?\b", _I)),
    ("stretch of work", re.compile(rf"\b(?:{_STRETCH})\s+sessions?\b", _I)),
    ("stretch of work", re.compile(r"\b(?:a|the)\s+session's\b", _I)),
    ("stretch of work", re.compile(r"\bsessions?(?:'s?)?\s+(?:budget|logs?|time|clock)\b|\bsession\.(?:log|sh)\b", _I)),
    ("stretch of work", re.compile(r"\b[Ss]essions? [A-H]\b")),
    ("tool", re.compile(r"\b(?:devic[e]|transf[e]r)\s+tools?\b|\boffline-v[l]lm\b", _I)),
    ("machine kind", re.compile(r"\bnvidi[a]-h[12]00(?:-x\d)?\b(?!-\d)", _I)),
    ("budget", re.compile(r"\bbudget_l[e]ft\b|\b(?:devic[e]|gpu|sess[i]on)[ -](?:time\s+)?budg[e]t\b", _I)),
    ("outside path", re.compile(r"\.\./sh[a]red\b|(?<![\w.~-])/w[o]rk/|\bupstr[e]am\.md\b", _I)),
    ("seeds", re.compile(r"\bthe\s+s[e]eds\b|\bs[e]eds'|\bthe\s+s[e]ed's\b|\bs[e]ed\s+\d{3}\b", _I)),
    ("issue reference", re.compile(r"\bissues?\s+#?\d+\b(?!\]\()", _I)),
    ("issue reference", re.compile(r"(?<![\w&/#])#\d+\b(?![\"';]|\]\()")),
    ("review anecdote", re.compile(r"\bind[e]pendent\s+reviews?\b|\brevi[e]ws'", _I)),
    ("review anecdote", re.compile(r"\b(?:a|the|another|second|third|one|that|this)\s+review(?:'s)?\s+"
                                   r"(?:found|of|measured|showed|saw|caught|cases?|misses)\b", _I)),
    ("review anecdote", re.compile(r"\b[Ff]inding [A-H]\b")),
)


def hits(text: str) -> list[tuple[int, str, str]]:
    """(line number, rule, matched text) for every rule a line of `text` breaks."""
    found: dict[tuple[int, str], str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        for rule, pattern in RULES:
            for match in pattern.finditer(line):
                found.setdefault((number, rule), match.group(0))  # an issue word and its number are one reference
    return [(number, rule, word) for (number, rule), word in found.items()]


def tracked_texts() -> list[tuple[str, str]]:
    """(path, text) of every tracked text file."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    texts = []
    for path in filter(None, listed.split("\0")):
        file = REPO / path
        if path.lower().endswith(SKIPPED_SUFFIXES) or not file.is_file():
            continue
        data = file.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts.append((path, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return texts


@pytest.mark.parametrize("line", [
    "vLLM 0.24.0 natively on a l·ent H200 host",
    "files short enough to read in one s·itting",
    "no GPU l·ent this s·itting",
    "the rest is left for the next s·ession",
    "a s·ession's budget of 30 minutes",
    "TP2 eager, boots 2-5 (s·ession C)",
    "raw logs: s·ession.log, ps.log.xz",
    "copy the parts with the t·ransfer tool",
    "see b·udget_left before you start",
    "Needs 4 GPUs (n·vidia-h200-x4 or x8)",
    "install the o·ffline-vllm parts",
    "build.sh from ../s·hared/tools/o·ffline-vllm",
    "raw logs in /w·ork/main/benchmarks",
    "Source: u·pstream.md",
    "the s·eeds' TP4 shape",
    "79.2 tok/s in s·eed 003",
    "one copy of the s·eed's down_proj",
    "as i·ssue 27 asks",
    "Hostile recipes (i·ssue #·12)",
    "fixed in #·19, see there",
    "an i·ndependent r·eview's 1.1% under a bound of 0.0002%",
    "a r·eview of the local runner's rounds",
    "the r·eview found RIG_IMAGE_TAG refused",
    "f·inding B: the bound missed",
])
def test_the_scan_finds_a_development_word(line):
    assert hits(line.replace("·", "")), line


@pytest.mark.parametrize("line", [
    "client = requests.Session()",
    "from locust.clients import HttpSession",
    "from rig.loadrun.session import model_dir_for",
    "the comparison runs its load through rig/loadrun/session.py",
    "Locust's session reports a refused or reset connection as status 0.",
    "One Locust process, in a session of its own: rig alone stops it",
    "subprocess.Popen(argv, start_new_session=True)",
    '@pytest.fixture(scope="session")',
    "#include <cuda_runtime.h>",
    'ax.axhline(0, color="#fff")',
    'ax.axvspan(-1, 1, color="#333", alpha=0.2)',
    "border: 1px solid #000000;",
    "seed: 1234",
    "for seed in seeds:",
    "rng = random.Random(seed)",
    "# 1. the first step",
    "SGLang's \"#running-req: 1, #token: 2048\"",
    "see [#12](docs/comparisons.md)",
    "what a reviewer sees",
    "finding a free port",
    "an air-gapped H200 host with Python 3.12 and torch 2.11",
    "nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3",
    "a preemptible host may vanish between two steps",
])
def test_the_scan_passes_a_product_word(line):
    assert not hits(line), hits(line)


def test_no_tracked_file_says_where_rig_was_built():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing says which files are tracked")
    texts = tracked_texts()
    assert len(texts) > 100, f"only {len(texts)} tracked text files read"
    found = [f"{path}:{number}:{rule}: {word}" for path, text in texts for number, rule, word in hits(text)]
    if found:
        pytest.fail(f"{len(found)} development words in tracked files:\n" + "\n".join(found), pytrace=False)
