"""Peer formats: `rig export RUN --format vllm|aiperf` and `rig import FILE`.

Export writes a run in the shape the peers' own tools and dashboards read, computed with the peers'
own definitions from rig's raw records inside the run's window: vLLM's benchmark client (`vllm`)
and AIPerf (`aiperf`), one module each.

Import reads those files (strictly: duplicate keys, NaN and wrong types refused; the fields rig
uses typed, others ignored) back into rig's request records and a run summary computed by rig's
own rules, its provenance marked `imported` (tool, file, sha256). rig did not see that client, so
the summary says its client was not checked instead of passing the check. With `--compare DIR
--arm A` the run also joins a comparison as one boot of arm A."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import NamedTuple

from rig import paths
from rig.atomic import write_text_atomic
from rig.errors import Damaged, Invalid, NotFound, RigError
from rig.load.inputs import display, read_regular
from rig.load.metrics import summarize
from rig.load.peers.aiperf import AIPERF_AGGREGATE, AIPERF_RECORDS, aiperf_aggregate, aiperf_records, read_aiperf
from rig.load.peers.vllm import VLLM_FILE, read_vllm, vllm_result
from rig.load.provenance import ClientSetup, ImportedFrom, Provenance, ScenarioRun
from rig.load.records import RequestRecord, read_records
from rig.load.summary import ClientVerdict, RunSummary, Window

# A peer's per-request export grows with its requests, not like a trace: AIPerf's profile_export.jsonl of
# 3000 streams over a 33 s benchmark on an H200 is 91 MB. The cap bounds the work, not just the read:
# an import holds every request's chunk times as rig's records and summarises them, about 13 times the
# file's size at its peak and under a second per MB (benchmarks/peer_import.py), so 256 MiB (almost three
# times that export) takes at most ~3.5 GB and a few minutes.
MAX_PEER_EXPORT_BYTES = 256 << 20


# --- export -----------------------------------------------------------------------------------


def _window_records(run: Path) -> tuple[RunSummary, list[RequestRecord], Window]:
    try:
        summary = RunSummary.read(run)
    except NotFound:
        raise NotFound(str(run), "summary.json", "not a run directory", "pass a results/<recipe>/<time>/<scenario> directory") from None
    except Damaged as error:
        raise Damaged(str(run / "summary.json"), error.field, f"unreadable run summary ({error.problem})",
                      "pass a complete run") from None
    window = summary.metrics.window
    records = read_records(run)
    if len(records) != summary.metrics.requests.total:  # records lost or added since the run: the export would be of others
        raise Damaged(str(run), "records-*.jsonl", f"{len(records)} request records where the run's summary counted "
                      f"{summary.metrics.requests.total}", "export a run whose records are as it wrote them")
    inside = [r for r in records if window.start <= r.t_send <= window.end]
    return summary, inside, window


def export_run(run: Path, fmt: str, out: Path | None = None) -> list[Path]:
    summary, records, window = _window_records(run)
    if summary.imported:
        raise RigError(str(run), "provenance", f"this run was imported from {summary.imported.tool}",
                       "export runs rig measured; the original file is already in that tool's format")
    out = out or run
    if fmt == "vllm":
        return [write_text_atomic(out / VLLM_FILE, json.dumps(vllm_result(summary, records, window), indent=1))]
    rows = aiperf_records(summary, records)
    return [write_text_atomic(out / AIPERF_RECORDS, "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)),
            write_text_atomic(out / AIPERF_AGGREGATE, json.dumps(aiperf_aggregate(summary, rows, window), indent=1))]


# --- import -----------------------------------------------------------------------------------


def _detect(data: bytes, where: str) -> str:
    head = data.lstrip()[:1]
    if head == b"{":
        first = data.split(b"\n", 1)[0]
        return "aiperf" if b'"metadata"' in first else "vllm"
    raise RigError(where, "(file)", "neither a vLLM result JSON nor an AIPerf profile_export.jsonl",
                   "pass vllm bench serve's --save-result --save-detailed file, or AIPerf's profile_export.jsonl")


class ImportedRun(NamedTuple):
    run: Path  # the run directory it was written to
    summary: RunSummary
    tool: str  # "vllm" or "aiperf"


def import_file(path: Path, scenario_ref: str | None, out: Path | None = None, progress: bool = True,
                under: Path | None = None) -> ImportedRun:
    """Reads a peer's file into a run directory (`out`, else a new one below `under`, by default
    results/imported), computed by rig's rules, provenance marked. (`rig import --compare` then adds
    it to a comparison: rig.compare.imported.)"""
    from rig.load.scenarios import load_scenario

    where = display(path)
    data = read_regular(path, where, MAX_PEER_EXPORT_BYTES, "pass a vLLM result JSON or an AIPerf profile_export.jsonl")
    tool = _detect(data, where)
    scenario = load_scenario(scenario_ref or "prose-c1")
    records, duration = (read_vllm if tool == "vllm" else read_aiperf)(data, where)
    if not records:
        raise Invalid(where, "(file)", "holds no requests", "pass the result of a run that sent requests")
    digest = hashlib.sha256(data).hexdigest()

    run = out or (under or paths.results_dir() / "imported") / f"{time.strftime('%Y%m%d-%H%M%S')}-{tool}-{digest[:8]}" / scenario.name
    if run.exists() and any(run.iterdir()):
        raise RigError(str(run), "(directory)", "already holds a run", "pass a new --out directory")
    starts = [r.t_send for r in records]
    ends = [r.t_last or r.t_end or r.t_send for r in records]
    begin = min(starts)
    end = begin + duration if duration is not None else max(ends)
    window = Window(start=begin, end=end, run_start=begin, run_end=end, steady=True,
                    opened_by=f"imported from {tool}: the peer's whole measurement (rig's steady-state rule was not applied)")
    metrics = summarize(records, window)
    summary = RunSummary(
        scenario=ScenarioRun.of(scenario, None, None),
        warmup=False, interrupted=False,
        provenance=Provenance(imported=ImportedFrom(tool=tool, file=str(path), sha256=digest, imported_at=time.time(),
                                                    records=len(records)),
                              recipe=None, variant=None, engine=f"unknown (measured by {tool})", image=None,
                              boot_id=f"imported-{tool}-{digest[:12]}", driver="imported", base_url=None, served_model=None,
                              host=None, client=ClientSetup(tool=tool), time=time.time()),
        metrics=metrics, client=ClientVerdict(valid=None, reasons=[], processes=0,
                                              note=f"measured by {tool}: rig cannot check that client's lag or CPU"),
    )
    run.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run / "records-imported.jsonl", "".join(r.to_line() + "\n" for r in records))
    from rig.load.report import write_run

    write_run(run, summary)
    if progress:
        print(f"imported {len(records)} request(s) from {tool} ({where}) into {run}")
        print(f"  {summary.kind} headline {summary.headline_text()}; problems: {'; '.join(summary.problems()) or 'none'}")
    return ImportedRun(run, summary, tool)
