"""Every kind of evidence a measurement may name (claim.yaml: kind), by name: one declaration each."""

from __future__ import annotations

from rig.validation.comparisons import ComparisonKind, CutComparisonKind, ReportKind
from rig.validation.figures import Kind
from rig.validation.races import RaceKind
from rig.validation.runs import KernelbenchKind, LoadRunKind

KINDS: dict[str, Kind] = {kind.name: kind for kind in (ComparisonKind(), CutComparisonKind(), ReportKind(), LoadRunKind(),
                                                        KernelbenchKind(), RaceKind())}
