"""The figure registry (rig/load/figures.py) against every consumer: each figure is declared once,
each consumer's table is a view of the registry, and no module of rig names a figure by a string of
its own."""

from __future__ import annotations

import ast
import json
import re
import tarfile
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from rig.load.figures import (
    BY_COLUMN,
    FIGURES,
    HEADLINE,
    LATENCY,
    LATENCY_SAMPLES,
    NEEDS_TWO_TOKENS,
    SWEEP,
    Boots,
    Figure,
    Statistic,
)
from rig.load.summary import Metrics, RunSummary

REPO = Path(__file__).resolve().parents[2]
REGISTRY = REPO / "rig" / "load" / "figures.py"


def test_every_kind_of_scenario_has_one_headline():
    from rig.load.kinds import Kind

    assert set(HEADLINE) == set(get_args(Kind))
    for figure in FIGURES.values():
        assert len(set(figure.headline_of)) == len(figure.headline_of), figure.name


def test_a_figure_is_declared_once():
    with pytest.raises(ValueError, match="declared twice"):
        Figure(name=next(iter(FIGURES)), unit="ms", higher_is_better=False, metric="e2e_s", stat="p50",
               statistic=Statistic.PERCENTILE, samples="e2e", quantile=0.5, client_rule="R5", boots=Boots.POOLED)
    assert set(FIGURES) == {figure.name for figure in FIGURES.values()}


def test_every_figure_reads_a_field_of_the_metrics_and_its_declared_samples(tmp_path):
    """Where a figure sits in the metrics is what its declaration says it is: a percentile is its
    quantile of the window's per-request samples, a token-weighted rate its distribution's headline."""
    from conftest import synthetic_run

    from rig.load.metrics import latency_samples
    from rig.load.records import read_records
    from rig.load.request_metrics import done_in_window

    synthetic_run(tmp_path / "run", requests=12)
    summary = RunSummary.read(tmp_path / "run")
    metrics = summary.metrics
    samples = latency_samples(done_in_window(read_records(tmp_path / "run"), metrics.window.start, metrics.window.end))
    for figure in FIGURES.values():
        assert figure.metric in Metrics.model_fields, figure.name
        value = figure.read(metrics)
        assert value is not None and value > 0, figure.name
        if figure.statistic is Statistic.PERCENTILE:
            expected = figure.scale * float(np.percentile(getattr(samples, str(figure.samples)), 100 * float(figure.quantile or 0)))
            assert value == pytest.approx(expected, rel=1e-9), figure.name
        elif figure.statistic is Statistic.TOKEN_WEIGHTED:
            assert figure.stat == "token_weighted", figure.name
    assert set(LATENCY_SAMPLES) <= set(vars(samples)), "a comparison keeps the samples its pooled percentiles read"


def test_every_client_bound_resolves_to_a_documented_rule():
    """Each figure's client rule (and pooled rule) is one client_error builds a bound from, and one
    docs/client-error.md writes down; the bound tables are the registry's figures, no more, no less."""
    from rig.load.client_error import BOUNDS, POOLED
    from rig.load.client_error.figures import POOLED_RULES, PROCESS_RULES

    documented = set(re.findall(r"^### (R\d+): ", (REPO / "docs" / "client-error.md").read_text(), re.MULTILINE))
    assert set(PROCESS_RULES) | set(POOLED_RULES) <= documented
    by_statistic = {Statistic.TOKEN_WEIGHTED: "R4", Statistic.PERCENTILE: "R5", Statistic.WINDOW_RATE: "R9"}
    for figure in FIGURES.values():
        assert figure.client_rule in PROCESS_RULES, figure.name
        assert figure.client_rule == by_statistic[figure.statistic], f"{figure.name}: the rule bounds another kind of figure"
        assert figure.pooled_rule is None or figure.pooled_rule in POOLED_RULES, figure.name
    assert list(BOUNDS) == list(FIGURES)
    assert set(POOLED) == {figure.name for figure in FIGURES.values() if figure.pooled_rule is not None}


def _named_figures(member: str, data: dict) -> set[str]:
    """The figures a stored run summary or boot entry names (its client bounds, headline, latency)."""
    if member.endswith("summary.json"):
        assert HEADLINE[data["scenario"]["kind"]].name in data["client"]["figures"], member
        return set(data["client"]["figures"])
    names: set[str] = set()
    for results in data.get("rounds", []):
        for result in results.values():
            names |= set(result["figures"]) | set(result.get("problems_by_figure", {})) | set(result.get("client_bounds", {}))
            assert set(result.get("latency", {})) <= set(LATENCY_SAMPLES), member
    return names


def test_every_figure_the_evidence_names_is_declared():
    """The committed evidence (validation/): every figure a run summary's client verdict bounds, and
    every figure a comparison's boot entry keeps per round, is one the registry declares. The two
    c3000 archives (10 MB of records each) are left to the golden bounds, which recompute them."""
    named: set[str] = set()
    for archive in sorted(path for path in (REPO / "validation").rglob("*.tar.xz") if path.stat().st_size < 1 << 20):
        with tarfile.open(archive) as tar:
            for member in tar:
                if re.search(r"(^|/)(summary\.json|boots/[^/]+\.json)$", member.name) and (data := tar.extractfile(member)):
                    named |= _named_figures(f"{archive.name}:{member.name}", json.load(data))
    assert named and named <= set(FIGURES), sorted(named - set(FIGURES))


def test_every_consumers_table_is_a_view_of_the_registry():
    from rig.load.report import COLUMN_FIGURES, COLUMNS
    from rig.loadrun.sweep import BOUNDED_COLUMNS, SLO_COLUMNS
    from rig.loadrun.sweep import COLUMNS as SWEEP_COLUMNS
    from rig.tune.space import LATENCY_BOUNDS

    assert {name: BY_COLUMN[name].name for name, _ in COLUMNS if name in BY_COLUMN} == COLUMN_FIGURES
    assert set(COLUMN_FIGURES) == set(BY_COLUMN)
    assert set(BOUNDED_COLUMNS) == {figure.name for figure in SWEEP} <= {name for name, _ in SWEEP_COLUMNS}
    assert {name for columns in SLO_COLUMNS.values() for name in columns} <= set(BOUNDED_COLUMNS)
    assert list(LATENCY_BOUNDS.values()) == list(LATENCY)
    assert set(LATENCY_BOUNDS) >= NEEDS_TWO_TOKENS
    assert all(figure.boots is Boots.POOLED and figure.statistic is Statistic.PERCENTILE for figure in LATENCY)


def _figure_literals(path: Path) -> list[str]:
    """String constants in a module equal to a figure's name (docstrings and prose only mention one)."""
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(REPO)}:{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FIGURES]


def test_no_module_names_a_figure_by_a_string_of_its_own():
    """A consumer reaches a figure through the registry (its constants or views), so renaming or adding
    one touches rig/load/figures.py alone."""
    paths = [*sorted((REPO / "rig").rglob("*.py")), *sorted((REPO / "loadtests").rglob("*.py"))]
    found = [hit for path in paths if path != REGISTRY for hit in _figure_literals(path)]
    assert found == []
    assert _figure_literals(REGISTRY), "the check finds the registry's own declarations"
