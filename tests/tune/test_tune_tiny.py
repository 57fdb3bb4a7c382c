"""`rig tune` end to end on tiny-cpu: real boots through the native driver, real Locust runs, a
space with a known truth. token_delay sleeps 0 or 3 ms per model step (tiny-cpu decodes a token in
about 6 ms); the second 0 ms set repeats a variable the recipe already sets to the same value: a
setting that changes nothing. The two 0 ms candidates are the truth; nothing can tell them apart.
The full space (0, 1, 2 and 3 ms, crossed with a server argument that changes nothing: 8
candidates) is raced once as a validation claim (validation/tiny-cpu-token-delay-race); this test
races 3 candidates in 3 rounds, to hold what the rule guarantees at any noise in a few minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, free_port

from rig.exits import Exit

pytestmark = pytest.mark.e2e

MAX_ROUNDS = 3  # 3 boots a round of about 16 s each on a quiet 2-core box: one look, after the third
CANDIDATES = 3
TRUTH = ("d0", "d0same")  # the fastest, and not to be told apart
SPACE = """env:
  d0: {RIG_TOKEN_DELAY_MS: "0"}
  d0same: {RIG_TOKEN_DELAY_MS: "0", TOKENIZERS_PARALLELISM: "false"}
  d3: {RIG_TOKEN_DELAY_MS: "3"}
"""


def test_the_token_delay_space_races_to_a_zero_delay_winner_within_its_budget(results_dir):
    out = results_dir / "tune" / "token-delay"
    space = results_dir / "tune" / "token-delay-corners.yaml"
    space.parent.mkdir(parents=True, exist_ok=True)
    space.write_text(SPACE)
    command = [sys.executable, "-m", "rig", "tune", "tiny-cpu", "--space", str(space),
               "--scenario", "prose-c1", "--baseline", "d0", "--max-rounds", str(MAX_ROUNDS), "--rounds", "1",
               "--duration", "2", "--small", "--workers", "1", "--port", str(free_port()), "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=30 * 60)
    assert done.returncode in (Exit.OK, Exit.UNDECIDED), done.stderr[-2000:]
    result = json.loads((out / "tune.json").read_text())
    answer = next(line for line in done.stdout.splitlines() if " wins (" in line)
    assert answer.startswith(f"tune: {result['winner']} wins (") and result["stop_text"] in answer  # says why it stopped
    rows = {row["candidate"]: row for row in result["rows"]}
    # The rule's guarantee: a 0 ms candidate (a true best) is never eliminated, so one of them is the
    # winner or not told apart from it; what leaves is slower.
    assert not any(rows[name]["status"].startswith("eliminated") for name in TRUTH), answer
    assert set(TRUTH) & {result["winner"], *result["tied"]}
    if result["stop"] in ("one", "equivalent"):  # the race decided: its winner is the truth
        assert result["winner"] in TRUTH, answer
    assert len(rows) == CANDIDATES and result["boots"] <= CANDIDATES * MAX_ROUNDS
    assert (out / "tune.png").stat().st_size > 0 and "tuned-" in (out / "winner.yaml").read_text()
