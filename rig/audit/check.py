"""Checks shapes against the constraint table and finds the smallest padding that fits."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from rig.audit.shapes import ExpertShard, Gemm
from rig.typed import Spec, Typed

CONSTRAINTS_PATH = Path(__file__).resolve().parent / "constraints.yaml"


class BackendRule(Spec):
    """One row of constraints.yaml: what shapes a backend accepts, where that is written, and for
    which versions; `fixed_by` names the rig adapter that pads a GEMM family to fit."""

    backend: str
    kind: Literal["dense", "experts"]
    hardware: str
    source: str
    versions: str
    k_multiple: int | None = None
    n_multiple: int | None = None
    min_n: int | None = None
    min_k: int | None = None
    hidden_multiple: int | None = None
    intermediate_multiple: int | None = None
    fixed_by: dict[str, str] = Field(default_factory=dict)


def constraints() -> dict[str, BackendRule]:
    return {name: BackendRule.model_validate(row) for name, row in yaml.safe_load(CONSTRAINTS_PATH.read_text()).items()}


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class Verdict(Typed):
    backend: str
    accepted: bool
    reasons: list[str]
    padded: tuple[int, int] | None = None  # (N, K) or (hidden, intermediate) that fits
    extra_work_pct: float = 0.0
    extra_bytes_pct: float = 0.0
    adapter: str | None = None


def _fit(dims: list[tuple[str, int, str, str | None]], rule: BackendRule) -> tuple[list[str], dict[str, int]]:
    """Each (label, value, multiple key, minimum key) rounded up to what the rule accepts."""
    reasons: list[str] = []
    fitted: dict[str, int] = {}
    for label, value, multiple_key, minimum_key in dims:
        new = value
        multiple = getattr(rule, multiple_key)
        if multiple and value % multiple:
            reasons.append(f"{label} % {multiple}")
            new = round_up(value, multiple)
        minimum = getattr(rule, minimum_key) if minimum_key else None
        if minimum and new < minimum:
            reasons.append(f"{label} >= {minimum}")
            new = minimum
        fitted[label] = new
    return reasons, fitted


def _verdict(backend_id: str, rule: BackendRule, before: tuple[int, int], reasons: list[str],
             after: tuple[int, int], family: str) -> Verdict:
    if not reasons:
        return Verdict(backend=backend_id, accepted=True, reasons=[])
    # Work and weight bytes both scale with the product of the two dimensions.
    extra = (after[0] * after[1] - before[0] * before[1]) / (before[0] * before[1]) * 100
    return Verdict(backend=backend_id, accepted=False, reasons=reasons, padded=after, extra_work_pct=extra, extra_bytes_pct=extra,
                   adapter=rule.fixed_by.get(family))


def check_gemm(gemm: Gemm, backend_id: str, rule: BackendRule) -> Verdict:
    reasons, fitted = _fit([("K", gemm.k, "k_multiple", "min_k"), ("N", gemm.n, "n_multiple", "min_n")], rule)
    return _verdict(backend_id, rule, (gemm.n, gemm.k), reasons, (fitted["N"], fitted["K"]), gemm.family)


def check_experts(shard: ExpertShard, backend_id: str, rule: BackendRule) -> Verdict:
    reasons, fitted = _fit([("hidden", shard.hidden, "hidden_multiple", None),
                            ("intermediate", shard.intermediate, "intermediate_multiple", None)], rule)
    return _verdict(backend_id, rule, (shard.hidden, shard.intermediate), reasons,
                    (fitted["hidden"], fitted["intermediate"]), "routed_experts")
