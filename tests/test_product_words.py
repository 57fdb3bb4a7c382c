"""rig's tracked files speak of rig, never of the place it was built in.

The scan reads every file `git ls-files` lists (text files only: a file with a NUL byte, one that is
not UTF-8, and .xz/.gz/.png and other archives or images are skipped; so is this file, which spells
the words out) and fails on any line that matches a rule below, listing file:line:rule: text.
Matching ignores case unless a rule says otherwise.

- lent: the word "lent" (a machine or host lent for a while). A GPU host is described by what it
  is, e.g. "an air-gapped H200 host with Python 3.12 and torch 2.11".
- sitting: "sitting" or "sittings" (a stretch of development work).
- development session: "session(s)" after a word that makes it a stretch of work (this, that,
  next, last, previous, earlier, later, each, every, one, another, same, current, whole, first to
  sixth, device, GPU, H100, H200, development, dev, working, work, helper), "a/the session's", and a
  session's budget, log(s), time or clock, session.log, session.sh, and a session named by a
  capital letter ("session C", case sensitive). An HTTP or Locust session (`requests.Session`,
  `HttpSession`, "Locust's session"), a POSIX process session ("in a session of its own",
  `start_new_session`) and the module rig/load/session.py match none of these.
- tool: "device tool(s)", "transfer tool(s)", offline-vllm (a tool kept outside the repository);
  budget: `budget_left`, a device, GPU or session (time) budget.
- machine kind: a lent machine's kind name (nvidia-h200, nvidia-h100-x4); a GPU's own product name
  (NVIDIA-H100-80GB-HBM3) is not one.
- outside path: `../shared`, any path under /work/, and upstream.md (a note outside the
  repository).
- seeds: the projects rig started from, cited as "the seeds", "the seeds'", "the seed's" or by
  number ("seed 003"). A random seed (`seed: 1234`, `seed=7`, `for seed in seeds`) is none of these.
- issue reference: "issue 27", "issues #12", "#19" in prose. Not a reference: a number that is
  part of a word or path (`vllm#12`, `a/#1`), an HTML entity (`&#38;`), a colour or other value
  closed by a quote or semicolon (`"#333"`, `#000000;`), `#include`, and a linked one
  (`[#12](https://...)`).
- review anecdote: "independent review(s)", "a/the/another/second review found/of/measured/showed/
  saw/caught/case(s)/misses", "the reviews'", and "finding B" (a capital letter A to H, case
  sensitive). Code states the rule and its reason; how the rule was found belongs to the commit.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()
SKIPPED_SUFFIXES = (".xz", ".gz", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".zip", ".tar", ".whl", ".zst", ".safetensors")

_I = re.IGNORECASE
_STRETCH = ("this|that|next|last|previous|earlier|later|each|every|one|another|same|current|whole|first|second|third|"
            "fourth|fifth|sixth|device|gpu|h100|h200|development|dev|working|work|helper")
RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("lent", re.compile(r"\blent\b", _I)),
    ("sitting", re.compile(r"\bsittings?\b", _I)),
    ("development session", re.compile(rf"\b(?:{_STRETCH})\s+sessions?\b", _I)),
    ("development session", re.compile(r"\b(?:a|the)\s+session's\b", _I)),
    ("development session", re.compile(r"\bsessions?(?:'s?)?\s+(?:budget|logs?|time|clock)\b|\bsession\.(?:log|sh)\b", _I)),
    ("development session", re.compile(r"\b[Ss]essions? [A-H]\b")),
    ("tool", re.compile(r"\b(?:device|transfer)\s+tools?\b|\boffline-vllm\b", _I)),
    ("machine kind", re.compile(r"\bnvidia-h[12]00(?:-x\d)?\b(?!-\d)", _I)),
    ("budget", re.compile(r"\bbudget_left\b|\b(?:device|gpu|session)[ -](?:time\s+)?budget\b", _I)),
    ("outside path", re.compile(r"\.\./shared\b|(?<![\w.~-])/work/|\bupstream\.md\b", _I)),
    ("seeds", re.compile(r"\bthe\s+seeds\b|\bseeds'|\bthe\s+seed's\b|\bseed\s+\d{3}\b", _I)),
    ("issue reference", re.compile(r"\bissues?\s+#?\d+\b(?!\]\()", _I)),
    ("issue reference", re.compile(r"(?<![\w&/#])#\d+\b(?![\"';]|\]\()")),
    ("review anecdote", re.compile(r"\bindependent\s+reviews?\b|\breviews'", _I)),
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
                found.setdefault((number, rule), match.group(0))  # "issue #12" is one reference
    return [(number, rule, word) for (number, rule), word in found.items()]


def tracked_texts() -> list[tuple[str, str]]:
    """(path, text) of every tracked text file but this one."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    texts = []
    for path in filter(None, listed.split("\0")):
        file = REPO / path
        if path == SELF or path.lower().endswith(SKIPPED_SUFFIXES) or not file.is_file():
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
    "vLLM 0.24.0 natively on a lent H200 host",
    "files short enough to read in one sitting",
    "no GPU lent this sitting",
    "the rest is left for the next session",
    "a session's budget of 30 minutes",
    "TP2 eager, boots 2-5 (session C)",
    "raw logs: session.log, ps.log.xz",
    "copy the parts with the transfer tool",
    "see budget_left before you start",
    "Needs 4 GPUs (nvidia-h200-x4 or x8)",
    "install the offline-vllm parts",
    "build.sh from ../shared/tools/offline-vllm",
    "raw logs in /work/main/benchmarks",
    "Source: upstream.md",
    "the seeds' TP4 shape",
    "79.2 tok/s in seed 003",
    "one copy of the seed's down_proj",
    "as issue 27 asks",
    "Hostile recipes (issue #12)",
    "fixed in #19, see there",
    "an independent review's 1.1% under a bound of 0.0002%",
    "a review of the local runner's rounds",
    "the review found RIG_IMAGE_TAG refused",
    "finding B: the bound missed",
])
def test_the_scan_finds_a_development_word(line):
    assert hits(line), line


@pytest.mark.parametrize("line", [
    "client = requests.Session()",
    "from locust.clients import HttpSession",
    "from rig.load.session import model_dir_for",
    "the comparison runs its load through rig/load/session.py",
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
    "see [#12](https://github.com/vllm-project/vllm/issues/12)",
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
