"""The audit's per-rank GEMMs held against what the engine allocated (the gemm_shapes instrument's
manifests from a boot): the shapes a deployment runs are read from the engine, not assumed.

A derived GEMM (N output features, K contraction) matches a recorded parameter whose name ends in
the audit's layer name (`mlp.down_proj` -> `...mlp.down_proj.weight`; routed experts' `w13`/`w2`
tensors carry the expert count first). Every rank must agree; a shape the engine fused or renamed
(vLLM fuses DeepSeek's q_a_proj and kv_a_proj_with_mqa) is reported as not found, never guessed.
"""

from __future__ import annotations

from pathlib import Path

from rig.audit.shapes import Gemm
from rig.boot.checks import read_manifests
from rig.typed import Typed

INSTRUMENT = "gemm_shapes"


def recorded_shapes(manifest_dir: str | Path, tp: int) -> dict[int, dict[str, list[int]]]:
    """TP rank -> parameter name -> shape, from every process that recorded them; refused in one line
    unless exactly ranks 0..tp-1 of a TP-`tp` engine recorded, once each (3 of 4 ranks agreeing, or
    two processes claiming one rank, is no evidence about the deployment)."""
    from rig.errors import RigError

    ranks: dict[int, dict[str, list[int]]] = {}
    problems = []
    for manifest in read_manifests(manifest_dir):
        shapes = ((manifest.get("adapters") or {}).get(INSTRUMENT) or {}).get("shapes")
        if not shapes:
            continue
        rank, size = shapes.get("tp_rank"), shapes.get("tp_size")
        if rank is None or size != tp:
            problems.append(f"pid {manifest.get('pid')} recorded rank {rank} of {size}")
        elif int(rank) in ranks:
            problems.append(f"rank {rank} recorded twice")
        else:
            ranks[int(rank)] = shapes["parameters"]
    if not problems and ranks and sorted(ranks) != list(range(tp)):
        problems.append(f"ranks {sorted(ranks)} recorded, {list(range(tp))} expected")
    if problems:
        raise RigError(str(manifest_dir), "(manifests)", "the recorded shapes do not cover the deployment's "
                       f"TP {tp} ranks once each ({'; '.join(problems)})", "boot the recipe again with gemm_shapes on")
    return ranks


def _suffix(layer: str) -> str:
    if layer.startswith("experts.w13"):
        return "experts.w13_weight"
    if layer.startswith("experts.w2"):
        return "experts.w2_weight"
    return f"{layer}.weight"


def _matches(parameters: dict[str, list[int]], gemm: Gemm) -> list[tuple[str, tuple[int, int]]]:
    suffix = _suffix(gemm.layer)
    found = []
    for name, shape in parameters.items():
        if (name == suffix or name.endswith("." + suffix)) and len(shape) >= 2:
            found.append((name, (shape[-2], shape[-1])))
    return found


class ShapeCheck(Typed):
    """One derived GEMM against the shapes every rank of a boot allocated."""

    family: str
    layer: str
    audit: tuple[int, int]  # N x K, derived
    engine: list[tuple[int, int]]  # the distinct shapes the engine's matching tensors have
    ranks: list[int]
    verdict: str  # agrees | DIFFERS | not found


def compare_shapes(gemms: list[Gemm], ranks: dict[int, dict[str, list[int]]]) -> list[ShapeCheck]:
    """One row per derived GEMM: 'agrees' (every rank's every matching tensor is N x K), 'DIFFERS'
    (with the shapes the engine has) or 'not found' (fused, renamed or absent)."""
    rows = []
    for gemm in gemms:
        seen: dict[tuple[int, int], set[int]] = {}
        names: set[str] = set()
        for rank, parameters in ranks.items():
            for name, shape in _matches(parameters, gemm):
                seen.setdefault(shape, set()).add(rank)
                names.add(name.rsplit(".", 2)[-2] if name.count(".") >= 2 else name)
        if not seen:
            verdict = "not found"
        elif set(seen) == {(gemm.n, gemm.k)} and all(len(r) == len(ranks) for r in seen.values()):
            verdict = "agrees"
        else:
            verdict = "DIFFERS"
        rows.append(ShapeCheck(family=gemm.family, layer=gemm.layer, audit=(gemm.n, gemm.k), engine=sorted(seen),
                               ranks=sorted(ranks), verdict=verdict))
    return rows


def markdown(rows: list[ShapeCheck], boot: str) -> str:
    lines = [f"### The engine's own shapes (boot {boot})", "",
             "| family | layer | audit N x K | engine N x K (every rank) | verdict |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        engine = ", ".join(f"{n}x{k}" for n, k in row.engine) or "-"
        lines.append(f"| {row.family} | {row.layer} | {row.audit[0]}x{row.audit[1]} | {engine} | {row.verdict} |")
    return "\n".join(lines)
