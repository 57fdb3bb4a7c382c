"""Checks shapes against the constraint table and finds the smallest padding that fits."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from rig.audit.shapes import ExpertShard, Gemm

CONSTRAINTS_PATH = Path(__file__).resolve().parent / "constraints.yaml"


def constraints() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(CONSTRAINTS_PATH.read_text())


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass
class Verdict:
    backend: str
    accepted: bool
    reasons: list[str]
    padded: tuple[int, int] | None = None  # (N, K) or (hidden, intermediate) that fits
    extra_work_pct: float = 0.0
    extra_bytes_pct: float = 0.0
    adapter: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _fit(dims: list[tuple[str, int, str, str | None]], rule: dict[str, Any]) -> tuple[list[str], dict[str, int]]:
    """Each (label, value, multiple key, minimum key) rounded up to what the rule accepts."""
    reasons: list[str] = []
    fitted: dict[str, int] = {}
    for label, value, multiple_key, minimum_key in dims:
        new = value
        multiple = rule.get(multiple_key)
        if multiple and value % multiple:
            reasons.append(f"{label} % {multiple}")
            new = round_up(value, multiple)
        minimum = rule.get(minimum_key) if minimum_key else None
        if minimum and new < minimum:
            reasons.append(f"{label} >= {minimum}")
            new = minimum
        fitted[label] = new
    return reasons, fitted


def _verdict(backend_id: str, rule: dict[str, Any], before: tuple[int, int], reasons: list[str],
             after: tuple[int, int], family: str) -> Verdict:
    if not reasons:
        return Verdict(backend_id, True, [])
    # Work and weight bytes both scale with the product of the two dimensions.
    extra = (after[0] * after[1] - before[0] * before[1]) / (before[0] * before[1]) * 100
    return Verdict(backend_id, False, reasons, after, extra, extra, (rule.get("fixed_by") or {}).get(family))


def check_gemm(gemm: Gemm, backend_id: str, rule: dict[str, Any]) -> Verdict:
    reasons, fitted = _fit([("K", gemm.k, "k_multiple", "min_k"), ("N", gemm.n, "n_multiple", "min_n")], rule)
    return _verdict(backend_id, rule, (gemm.n, gemm.k), reasons, (fitted["N"], fitted["K"]), gemm.family)


def check_experts(shard: ExpertShard, backend_id: str, rule: dict[str, Any]) -> Verdict:
    reasons, fitted = _fit([("hidden", shard.hidden, "hidden_multiple", None),
                            ("intermediate", shard.intermediate, "intermediate_multiple", None)], rule)
    return _verdict(backend_id, rule, (shard.hidden, shard.intermediate), reasons,
                    (fitted["hidden"], fitted["intermediate"]), "routed_experts")
