"""Each claim's figures recomputed from its evidence and held to the claim, digit for digit.

A figure matches when the evidence, read by its measurement's kind with rig's own code, prints
exactly what the claim quotes; the claim's own value is then the range its measurements print
(rig.validation.claims.summary_value). Bad evidence (an archive that is not there or does not
unpack, a file rig refuses, a kind that does not exist) is the claim's result too: one line naming
the file, the field and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rig.errors import Damaged, Invalid, RigError
from rig.typed import first_problem
from rig.validation.claims import Claim, Measurement, summary_value
from rig.validation.evidence import EvidenceStore
from rig.validation.kinds import KINDS


@dataclass
class FigureCheck:
    name: str
    claimed: str
    recomputed: str | None  # None: the evidence gives no figure of that name

    @property
    def ok(self) -> bool:
        return self.claimed == self.recomputed


@dataclass
class ClaimResult:
    claim: Claim
    checks: list[tuple[Measurement, list[FigureCheck]]] = field(default_factory=list)
    error: RigError | None = None  # the evidence could not be read: no figure was checked

    @property
    def ok(self) -> bool:
        return self.error is None and all(check.ok for _, checks in self.checks for check in checks)

    @property
    def mismatches(self) -> list[FigureCheck]:
        return [check for _, checks in self.checks for check in checks if not check.ok]

    @property
    def figures(self) -> int:
        return sum(len(checks) for _, checks in self.checks)

    def recomputed_value(self) -> str | None:
        """The claim's value from the recomputed figures (None where one is missing)."""
        values = [check.recomputed for _, checks in self.checks for check in checks if check.name == self.claim.figure]
        if any(value is None for value in values):
            return None
        return summary_value([value for value in values if value is not None])


def recompute_measurement(measurement: Measurement, store: EvidenceStore, where: str) -> list[FigureCheck]:
    kind = KINDS.get(measurement.kind)
    if kind is None:
        raise Invalid(where, "kind", f"no kind {measurement.kind!r}", f"use one of {', '.join(sorted(KINDS))}")
    try:
        figures = store.figures(kind.name, measurement.evidence, kind.compute)
    except ValidationError as error:  # a file of the evidence that is not the shape its reader expects
        name, problem = first_problem(error)
        raise Damaged(f"validation/{measurement.evidence}", name, problem, "pack the files rig wrote, unchanged") from None
    return [FigureCheck(name, claimed, figures.get(name)) for name, claimed in measurement.figures.items()]


def recompute(claim: Claim, store: EvidenceStore) -> ClaimResult:
    result = ClaimResult(claim)
    try:
        for index, measurement in enumerate(claim.measurements):
            where = f"{claim.where()}: measurements.{index}"
            result.checks.append((measurement, recompute_measurement(measurement, store, where)))
    except RigError as error:
        result.checks, result.error = [], error
    return result


def recompute_all(claims: list[Claim], root: Path) -> list[ClaimResult]:
    with EvidenceStore(root) as store:
        return [recompute(claim, store) for claim in claims]


def verdict_line(result: ClaimResult) -> str:
    """One line, its answer first: OK, MISMATCH (the first figure that differs) or BAD (the evidence)."""
    claim = result.claim
    if result.error is not None:
        return f"BAD       {claim.id}: {result.error}"
    if result.ok:
        return (f"OK        {claim.id}: {claim.figure}: claimed {claim.value}, recomputed {result.recomputed_value()} "
                f"({result.figures} figures)")
    first = result.mismatches[0]
    recomputed = "nothing (the evidence gives no such figure)" if first.recomputed is None else first.recomputed
    return (f"MISMATCH  {claim.id}: {first.name}: claimed {first.claimed}, recomputed {recomputed} "
            f"({len(result.mismatches)} of {result.figures} figures differ)")


def figure_lines(result: ClaimResult) -> list[str]:
    """Every figure of a claim (--verbose)."""
    lines = []
    for measurement, checks in result.checks:
        lines.append(f"    {measurement.date} ({measurement.kind}, validation/{measurement.evidence})")
        lines += [f"      {'ok' if check.ok else 'DIFFERS':8} {check.name}: claimed {check.claimed}, recomputed {check.recomputed}"
                  for check in checks]
    return lines
