"""Commit messages that read in `git log --oneline`: from the first commit that follows the rule
on, every subject is at most 72 characters, and a body, where there is one, is set off by a blank
line. Older history is left as it was published."""

from __future__ import annotations

import subprocess

import pytest
from conftest import REPO

FIRST_UNDER_THE_RULE = "4a929af"  # "Scan tracked files for where rig was built; clean them out"
MAX_SUBJECT = 72


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def test_every_commit_subject_since_the_rule_fits_one_line_and_a_body_is_set_off():
    if _git("cat-file", "-e", f"{FIRST_UNDER_THE_RULE}^{{commit}}").returncode != 0:
        pytest.skip(f"commit {FIRST_UNDER_THE_RULE} is not in this clone (a shallow clone): history cannot be read")
    log = _git("log", "--format=%h%x00%B%x01", f"{FIRST_UNDER_THE_RULE}^..HEAD").stdout
    problems = []
    for entry in filter(str.strip, log.split("\x01")):
        commit, _, message = entry.strip().partition("\x00")
        lines = message.splitlines()
        if len(lines[0]) > MAX_SUBJECT:
            problems.append(f"{commit}: subject of {len(lines[0])} characters (at most {MAX_SUBJECT}): {lines[0][:60]}...")
        if len(lines) > 1 and lines[1].strip():
            problems.append(f"{commit}: no blank line between the subject and the body")
    assert problems == [], "\n".join(problems)
