"""docs/client-error.md states the model as rules R1..Rn: every rule the code names is there, and
every rule there names tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = (REPO / "docs" / "client-error.md").read_text()
RULE = re.compile(r"^### (R\d+): ", re.MULTILINE)


def sections() -> dict[str, str]:
    found = list(RULE.finditer(DOC))
    return {m.group(1): DOC[m.end():found[i + 1].start() if i + 1 < len(found) else len(DOC)] for i, m in enumerate(found)}


def test_the_rules_are_numbered_in_order():
    rules = [m.group(1) for m in RULE.finditer(DOC)]
    assert rules == [f"R{n}" for n in range(1, len(rules) + 1)], rules


def test_every_rule_the_code_names_is_written_down():
    named = {rule for path in (REPO / "rig" / "load" / "client_error").glob("*.py") for rule in re.findall(r"\bR\d+\b", path.read_text())}
    assert named and named <= set(sections()), sorted(named - set(sections()))


def test_every_rule_names_tests_that_exist():
    for rule, text in sections().items():
        [line] = [line for line in text.splitlines() if line.startswith("- Tests:")]
        paths = re.findall(r"tests/[\w/]+\.py", line)
        assert paths, rule
        for path in paths:
            assert (REPO / path).is_file(), (rule, path)
            assert re.search(r"^def test_", (REPO / path).read_text(), re.MULTILINE), (rule, path)


def test_every_rules_test_file_is_a_rule_of_the_document():
    for path in (REPO / "tests" / "load" / "client_error").glob("test_r[0-9]*.py"):
        numbers = re.findall(r"_r(\d+)(?=_)", path.stem)
        assert numbers and {f"R{n}" for n in numbers} <= set(sections()), path.name
        assert any(path.name in text for text in sections().values()), path.name
