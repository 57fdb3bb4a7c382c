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


def check_gemm(gemm: Gemm, backend_id: str, rule: dict[str, Any]) -> Verdict:
    n, k = gemm.n, gemm.k
    reasons = []
    new_n, new_k = n, k
    if rule.get("k_multiple") and k % rule["k_multiple"]:
        reasons.append(f"K % {rule['k_multiple']}")
        new_k = round_up(k, rule["k_multiple"])
    if rule.get("n_multiple") and n % rule["n_multiple"]:
        reasons.append(f"N % {rule['n_multiple']}")
        new_n = round_up(n, rule["n_multiple"])
    if rule.get("min_k") and new_k < rule["min_k"]:
        reasons.append(f"K >= {rule['min_k']}")
        new_k = rule["min_k"]
    if rule.get("min_n") and new_n < rule["min_n"]:
        reasons.append(f"N >= {rule['min_n']}")
        new_n = rule["min_n"]
    if not reasons:
        return Verdict(backend_id, True, [])
    extra = (new_n * new_k - n * k) / (n * k) * 100
    return Verdict(backend_id, False, reasons, (new_n, new_k), extra, extra, (rule.get("fixed_by") or {}).get(gemm.family))


def check_experts(shard: ExpertShard, backend_id: str, rule: dict[str, Any]) -> Verdict:
    reasons = []
    hidden, inter = shard.hidden, shard.intermediate
    new_hidden, new_inter = hidden, inter
    if rule.get("hidden_multiple") and hidden % rule["hidden_multiple"]:
        reasons.append(f"hidden % {rule['hidden_multiple']}")
        new_hidden = round_up(hidden, rule["hidden_multiple"])
    if rule.get("intermediate_multiple") and inter % rule["intermediate_multiple"]:
        reasons.append(f"intermediate % {rule['intermediate_multiple']}")
        new_inter = round_up(inter, rule["intermediate_multiple"])
    if not reasons:
        return Verdict(backend_id, True, [])
    extra = (new_hidden * new_inter - hidden * inter) / (hidden * inter) * 100  # gate_up and down both scale so
    return Verdict(backend_id, False, reasons, (new_hidden, new_inter), extra, extra, (rule.get("fixed_by") or {}).get("routed_experts"))
