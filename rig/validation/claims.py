"""A claim as data: validation/<id>/claim.yaml, read strictly (rig.strict_yaml) into typed models.

A claim rests on one or more measurements of the same thing. Each measurement names its evidence (a
.tar.xz archive under validation/), how that evidence is read (`kind`: rig.validation.kinds) and the
figures it gave, by the names the kind computes, each as printed. The claim's own figure is one of
those names: its value is that measurement's where there is one, and the range over the measurements
that have it where there are several ("A to B", or the value itself where all print the same), so a
second measurement can never hide behind the first.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from rig.errors import Invalid, NotFound
from rig.paths import REPO_ROOT
from rig.strict_yaml import load_yaml_file
from rig.typed import Spec, first_problem, misspelled

VALIDATION_DIR = REPO_ROOT / "validation"
CLAIM_FILE = "claim.yaml"
CLAIM_SCHEMA = 1
CLAIM_MAX_BYTES = 64 << 10
# An id is its folder's name and its section's anchor in docs/validation.md: GitHub's anchor for a
# heading of lowercase letters, digits and hyphens is the heading itself.
CLAIM_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
DATE = re.compile(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]")
EVIDENCE = re.compile(r"[a-z0-9][a-z0-9-]*/[a-z0-9][a-z0-9.-]*\.tar\.xz")
NUMBER = re.compile(r"[-+]?[0-9][0-9,]*(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?")


class Measurement(Spec):
    """One measurement behind a claim: what produced it, where its evidence is, what it gave."""

    date: str  # when it was measured, YYYY-MM-DD
    command: str  # the exact command that produced the evidence
    kind: str  # how the evidence is read and its figures recomputed (a key of rig.validation.kinds.KINDS)
    evidence: str  # <claim>/<file>.tar.xz, relative to validation/ (a measurement may share another claim's)
    figures: dict[str, str]  # figure name (as the kind computes it) -> its value as printed
    note: str | None = None  # what sets this measurement apart from the others (design, host, rule)

    @field_validator("date")
    @classmethod
    def _date(cls, value: str) -> str:
        if not DATE.fullmatch(value):
            raise ValueError(f"{value!r} is not a date YYYY-MM-DD")
        return value

    @field_validator("evidence")
    @classmethod
    def _evidence(cls, value: str) -> str:
        if not EVIDENCE.fullmatch(value):
            raise ValueError(f"{value!r} is not <claim>/<file>.tar.xz under validation/")
        return value

    @field_validator("figures")
    @classmethod
    def _figures(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("a measurement gives at least one figure")
        return value


class Claim(Spec):
    """validation/<id>/claim.yaml."""

    schema_version: int = Field(alias="schema")
    id: str
    title: str  # one line: what is claimed
    claim: str  # the claim in a few sentences, as a user may rely on it
    figure: str  # the figure the claim rests on: a figure name of its measurements
    value: str  # that figure as printed: one measurement's, or the range over several
    hardware: str
    engine: str  # engine and version
    attention_backend: str  # stated plainly: it is not what users run by default on every engine
    measurements: list[Measurement]
    differences: list[str] = Field(default_factory=list)  # differences between measurements no one has explained

    @field_validator("schema_version")
    @classmethod
    def _schema(cls, value: int) -> int:
        if value != CLAIM_SCHEMA:
            raise ValueError(f"schema {value} is not {CLAIM_SCHEMA}")
        return value

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not CLAIM_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not an id of lowercase letters, digits and hyphens")
        return value

    @field_validator("measurements")
    @classmethod
    def _measured(cls, value: list[Measurement]) -> list[Measurement]:
        if not value:
            raise ValueError("a claim rests on at least one measurement")
        return value

    def where(self) -> str:
        return f"validation/{self.id}/{CLAIM_FILE}"

    def values(self) -> list[str]:
        """The claim's figure in each measurement that gives it, in the claim's order."""
        return [m.figures[self.figure] for m in self.measurements if self.figure in m.figures]

    def printed(self) -> set[str]:
        """Every value this claim prints: its own and each measurement's figures."""
        return {self.value} | {value for m in self.measurements for value in m.figures.values()}


def leading_number(value: str) -> float | None:
    """The number a printed figure starts with ("-1.29%" -> -1.29, "21,076" -> 21076); None for words."""
    found = NUMBER.match(value.strip())
    return float(found.group(0).replace(",", "")) if found else None


def summary_value(values: list[str]) -> str | None:
    """The claim's value over its measurements: the one value, the value all of them print, or
    "lowest to highest" by the number each starts with; None when they differ and some are words."""
    if len(set(values)) == 1:
        return values[0]
    numbers = [leading_number(value) for value in values]
    if not values or any(n is None for n in numbers):
        return None
    ordered = [value for _, value in sorted(zip(numbers, values), key=lambda pair: pair[0])]
    return f"{ordered[0]} to {ordered[-1]}"


def check_claim(claim: Claim, folder: str) -> None:
    """What the schema cannot say alone: the id is the folder, and the figure is given."""
    where = claim.where()
    if claim.id != folder:
        raise Invalid(where, "id", f"id {claim.id!r} differs from its folder {folder!r}", f"set id: {folder}")
    values = claim.values()
    if not values:
        raise Invalid(where, "figure", f"no measurement gives {claim.figure!r}", "name a figure of a measurement")
    expected = summary_value(values)
    if expected is None:
        raise Invalid(where, "figure", f"{claim.figure!r} reads {values}: words that differ have no range",
                      "name a figure every measurement prints alike, or a number")
    if claim.value != expected:
        raise Invalid(where, "value", f"{claim.value!r} is not what its measurements print ({expected!r})",
                      f"set value: {expected!r}")


def read_claim(folder: Path) -> Claim:
    """One claim file, strictly: one line naming file, field and fix for anything wrong."""
    where = f"validation/{folder.name}/{CLAIM_FILE}"
    raw = load_yaml_file(folder / CLAIM_FILE, CLAIM_MAX_BYTES, where)
    if not isinstance(raw, dict):
        raise Invalid(where, "(top level)", "a claim is a mapping", "start from another claim's file")
    try:
        claim = Claim.model_validate(raw)
    except ValidationError as error:
        typo = misspelled(error)
        if typo:
            loc, problem, fix = typo
            raise Invalid(where, ".".join(map(str, loc)), problem, fix) from None
        field, problem = first_problem(error)
        raise Invalid(where, field, problem, "write it as the other claims do (docs/validation.md)") from None
    check_claim(claim, folder.name)
    return claim


def claim_ids(root: Path = VALIDATION_DIR) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / CLAIM_FILE).is_file()) if root.is_dir() else []


def read_claims(root: Path = VALIDATION_DIR, only: str | None = None) -> list[Claim]:
    ids = claim_ids(root)
    if only is not None:
        if only not in ids:
            raise NotFound("--claim", only, "no such claim", f"use one of {', '.join(ids)}")
        ids = [only]
    return [read_claim(root / claim_id) for claim_id in ids]
