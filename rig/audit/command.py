"""`rig audit <recipe>`: find the slow shapes before booting a 400 GB model. Markdown or JSON."""

from __future__ import annotations

import json

from rig.audit.check import Verdict, check_experts, check_gemm, constraints
from rig.audit.engine_shapes import ShapeCheck
from rig.audit.shapes import ModelDims, derive, load_dims
from rig.deploy.recipe import Resolved, parse_recipe, recipe_path, split_ref
from rig.errors import RigError
from rig.exits import Exit
from rig.typed import Typed

DENSE_FAMILIES = ("dense_mlp", "shared_expert", "attention")


class GemmRow(Typed):
    family: str
    layer: str
    n: int
    k: int
    note: str
    verdicts: list[Verdict]


class ExpertVerdict(Verdict):
    versions: str


class ExpertsRow(Typed):
    hidden: int
    intermediate: int
    note: str
    verdicts: list[ExpertVerdict]


class OffFastPath(Verdict):
    """A shape a listed backend rejects, with its smallest padding."""

    layer: str
    n: int
    k: int


class BackendInfo(Typed):
    backend: str
    source: str
    versions: str
    hardware: str


class AuditTopology(Typed):
    tp: int
    ep: int
    dcp: int


class AuditReport(Typed):
    """One recipe variant's audit: `rig audit` prints it as markdown or (--json) as this."""

    recipe: str
    model: str
    dims_source: str
    topology: AuditTopology
    engine: str
    gemms: list[GemmRow]
    experts: ExpertsRow | None
    off_fast_path: list[OffFastPath]
    not_derivable: list[str]
    backends: dict[str, BackendInfo]
    engine_shapes: list[ShapeCheck] | None = None  # --boot: the derived GEMMs against the engine's own


def recipe_dims(resolved: Resolved, model_dir: str | None) -> tuple[ModelDims, str]:
    """The model's dimensions: from --model-dir, else from the model rig generates for the recipe
    (its config.json, the one source of its shapes), else from the shipped dims the recipe names."""
    model = resolved.recipe.model
    if model_dir is None and model.dims is None and model.source == "generated":
        from rig.boot.native import NativeDriver

        model_dir = NativeDriver().model_path(resolved)
    return load_dims(model.dims, model_dir)


def audit_variant(resolved: Resolved, model_dir: str | None) -> AuditReport:
    table = constraints()
    dims, source = recipe_dims(resolved, model_dir)
    gemms, shard, unknown = derive(resolved, dims)
    spec = resolved.audit
    rows = []
    for gemm in gemms:
        backends = spec.dense if gemm.family in DENSE_FAMILIES else []
        rows.append(GemmRow(family=gemm.family, layer=gemm.layer, n=gemm.n, k=gemm.k, note=gemm.note,
                            verdicts=[check_gemm(gemm, b, table[b]) for b in backends]))
    experts = None
    if shard is not None:
        experts = ExpertsRow(hidden=shard.hidden, intermediate=shard.intermediate, note=shard.note,
                             verdicts=[ExpertVerdict(**check_experts(shard, b, table[b]).model_dump(), versions=table[b].versions)
                                       for b in spec.experts])
    off = [OffFastPath(layer=r.layer, n=r.n, k=r.k, **v.model_dump()) for r in rows for v in r.verdicts if not v.accepted]
    if experts:
        off += [OffFastPath(layer="routed experts", n=experts.hidden, k=experts.intermediate,
                            **v.model_dump(exclude={"versions"})) for v in experts.verdicts if not v.accepted]
    topo = resolved.topology
    return AuditReport(recipe=resolved.ref, model=dims.name or resolved.recipe.model.id, dims_source=source,
                       topology=AuditTopology(tp=topo.tp, ep=topo.ep, dcp=topo.dcp), engine=resolved.recipe.engine.name,
                       gemms=rows, experts=experts, off_fast_path=off, not_derivable=unknown,
                       backends={b: BackendInfo(backend=table[b].backend, source=table[b].source, versions=table[b].versions,
                                                hardware=table[b].hardware) for b in [*spec.dense, *spec.experts]})


def _verdict_text(v: Verdict) -> str:
    if v.accepted or v.padded is None:
        return "ok"
    pad = v.padded
    adapter = f" [adapter: {v.adapter}]" if v.adapter else " [no adapter]"
    return f"REJECTED ({', '.join(v.reasons)}) -> {pad[0]}x{pad[1]} +{v.extra_work_pct:.1f}% work{adapter}"


def markdown(report: AuditReport) -> str:
    topo = report.topology
    lines = [f"## rig audit {report.recipe}: {report.model} on {report.engine}, TP={topo.tp} EP={topo.ep} DCP={topo.dcp}",
             f"dimensions: {report.dims_source}", "",
             "| family | layer | N | K |" + "".join(f" {b} |" for b in report.backends),
             "| --- | --- | ---: | ---: |" + " --- |" * len(report.backends)]
    for row in report.gemms:
        cells = {v.backend: _verdict_text(v) for v in row.verdicts}
        lines.append(f"| {row.family} | {row.layer} | {row.n} | {row.k} |" + "".join(f" {cells.get(b, '-')} |" for b in report.backends))
    if report.experts:
        e = report.experts
        lines += ["", f"Routed-expert shard per rank: hidden {e.hidden}, intermediate {e.intermediate} ({e.note})"]
        for v in e.verdicts:
            lines.append(f"- {v.backend} ({v.versions}): {_verdict_text(v) if not v.accepted else 'accepted natively'}")
    lines += ["", "Off the fast path:"]
    if not report.off_fast_path:
        lines.append("- nothing: every derived shape is accepted by every listed backend")
    for off in report.off_fast_path:
        pad = off.padded or (off.n, off.k)
        experts = off.layer == "routed experts"
        shape = f"hidden={off.n} intermediate={off.k}" if experts else f"N={off.n} K={off.k}"
        padded = f"intermediate {pad[1]}" if experts and pad[0] == off.n else f"{pad[0]}x{pad[1]}"
        lines.append(f"- {off.layer} {shape}: rejected by {off.backend} ({', '.join(off.reasons)}); "
                     f"smallest pad {padded}: +{off.extra_work_pct:.1f}% work, +{off.extra_bytes_pct:.1f}% bytes; "
                     f"adapter: {off.adapter or 'none'}")
    if report.not_derivable:
        lines.append(f"\nNot derivable from the shipped dimensions (pass --model-dir): {'; '.join(report.not_derivable)}")
    return "\n".join(lines)


def audit(ref: str, model_dir: str | None, as_json: bool, boot: str | None = None) -> int:
    """Audit every variant (or the one named); with `boot`, hold the derived shapes against the shapes
    that boot's engine recorded (gemm_shapes) and exit 1 when any differs."""
    name, variant = split_ref(ref)
    recipe = parse_recipe(recipe_path(name))
    variants = [variant] if variant else (list(recipe.variants) or [None])
    reports = [audit_variant(recipe.variant(v), model_dir) for v in variants]
    differs = False
    if boot is not None:
        from rig import paths
        from rig.audit.engine_shapes import compare_shapes, recorded_shapes
        from rig.audit.shapes import Gemm
        from rig.boot.record import BootRecord

        record = BootRecord.load(paths.boots_dir() / boot / "boot.json")
        resolved = recipe.variant(record.variant)
        if len(reports) != 1 or reports[0].recipe != resolved.ref:
            raise RigError("command line", "--boot", f"boot {boot} ran {record.ref}, not {ref}", f"audit {record.ref} --boot {boot}")
        ranks = recorded_shapes(record.manifest_dir, resolved.topology.tp)
        if not ranks:
            raise RigError(record.manifest_dir, "(manifests)", "no process of this boot recorded its shapes",
                           "boot with the gemm_shapes instrument on (RIG_GEMM_SHAPES=1, in the recipe's adapters)")
        gemms = [Gemm(r.family, r.layer, r.n, r.k, r.note) for r in reports[0].gemms]
        reports[0].engine_shapes = compare_shapes(gemms, ranks)
        verdicts = [row.verdict for row in reports[0].engine_shapes]
        differs = "DIFFERS" in verdicts or "agrees" not in verdicts  # nothing matched is no agreement either
    if as_json:
        print(json.dumps([report.model_dump(mode="json") for report in reports], indent=1))
    else:
        from rig.audit.engine_shapes import markdown as engine_markdown

        print("\n\n".join(markdown(r) + ("\n\n" + engine_markdown(r.engine_shapes, boot or "") if r.engine_shapes is not None else "")
                           for r in reports))
    return Exit.FAILED if differs else Exit.OK
