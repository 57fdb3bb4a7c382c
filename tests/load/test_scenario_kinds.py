"""Each kind of scenario is declared once (rig/load/kinds.py): the shipped scenarios, the headlines,
the Locust user classes and the code that branches on a kind all read the declaration, and no module
compares a kind's name with a string of its own."""

from __future__ import annotations

import ast
from typing import get_args

from conftest import REPO

from rig.load.figures import HEADLINE
from rig.load.kinds import ARRIVAL_KINDS, CLOSED_KINDS, KINDS, Kind
from rig.load.scenarios import LOADTESTS, load_scenario

DECLARED = frozenset(KINDS)


def test_every_kind_is_declared_once_and_split_into_closed_and_arrival_driven():
    assert tuple(KINDS) == get_args(Kind)
    assert sorted(CLOSED_KINDS + ARRIVAL_KINDS) == sorted(KINDS) and not set(CLOSED_KINDS) & set(ARRIVAL_KINDS)
    sections = [kind.section for kind in KINDS.values() if kind.section is not None]
    assert len(sections) == len(set(sections))


def test_every_kind_has_a_headline_and_a_user_class_that_exists():
    assert set(HEADLINE) == DECLARED
    # read, not imported: importing Locust's users patches the process for gevent
    classes = {node.name for node in ast.walk(ast.parse((REPO / "rig" / "load" / "client" / "users.py").read_text()))
               if isinstance(node, ast.ClassDef)}
    for kind in KINDS.values():
        assert kind.user_class in classes, (kind.name, kind.user_class)


def test_every_shipped_scenario_has_the_section_its_kind_needs_and_no_other():
    shipped = sorted(LOADTESTS.glob("scenarios/*.yaml"))
    assert shipped
    seen = set()
    for path in shipped:
        scenario = load_scenario(path.stem)
        kind = KINDS[scenario.kind]
        seen.add(kind.name)
        for other in KINDS.values():
            if other.section is not None:
                assert (getattr(scenario, other.section) is not None) == (other is kind), (path.name, other.section)
        assert kind.endpoint is None or scenario.endpoint == kind.endpoint
    assert seen == DECLARED  # every kind has a scenario that runs it


def _names_a_kind(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in DECLARED or (
        isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_kind(e) for e in node.elts))


def _is_a_kind(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (isinstance(node, ast.Name) and node.id == "kind")


def test_no_module_compares_a_kind_with_a_string_of_its_own():
    """A branch on `scenario.kind == "trace"` is a second definition of what a trace is."""
    found = []
    for path in sorted([*(REPO / "rig").rglob("*.py"), *(REPO / "loadtests").rglob("*.py")]):
        if path == REPO / "rig" / "load" / "kinds.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(_is_a_kind(o) for o in operands) and any(_names_a_kind(o) for o in operands):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
