"""Peer formats: `rig export RUN --format vllm|aiperf` and `rig import FILE`.

Export writes a run in the shape the peers' own tools and dashboards read, computed with the peers'
own definitions from rig's raw records inside the run's window:
- vLLM (`vllm bench serve --save-result --save-detailed`): `completed`, `failed`, `duration`,
  `request_throughput`, `output_throughput`, `total_token_throughput`, mean/median/std/p99 of
  `ttft`/`tpot`/`itl`/`e2el` in ms (TPOT = (latency - ttft) / (output_len - 1)), per request
  `input_lens`, `output_lens`, `ttfts`, `itls` (seconds), `generated_texts`, `errors`.
- AIPerf: `profile_export.jsonl` (per request `metadata` with `request_start_ns`/`request_end_ns`,
  `metrics` as {value, unit} with `time_to_first_token`, `inter_chunk_latency`, ... in ms, `error`)
  and `profile_export_aiperf.json` (per metric unit/avg/min/max/p*/std/count/sum).

Import reads those files (strictly: duplicate keys, NaN and wrong types refused; the fields rig
uses typed, others ignored) back into rig's request records and a run summary computed by rig's
own rules, its provenance marked `imported` (tool, file, sha256). rig did not see that client, so
the summary says its client was not checked instead of passing the check. With `--compare DIR
--arm A` the run also joins a comparison as one boot of arm A."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import itertools
import json
import time
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from rig import paths
from rig.atomic import write_text_atomic
from rig.errors import Damaged, Invalid, NotFound, RigError
from rig.load.inputs import display, read_regular
from rig.load.metrics import summarize
from rig.load.provenance import ClientSetup, ImportedFrom, Provenance, ScenarioRun
from rig.load.records import RequestRecord, read_records
from rig.load.request_metrics import Done, e2e, itl, run_tokens_per_chunk, ttft
from rig.load.summary import ClientVerdict, RunSummary, Window
from rig.strict_yaml import strict_json
from rig.typed import MAX_TIME_S, MAX_TOKENS, STORED, Count, Epoch, Finite, Seconds, Tokens, first_problem

VLLM_FILE = "vllm-result.json"
AIPERF_RECORDS = "profile_export.jsonl"
AIPERF_AGGREGATE = "profile_export_aiperf.json"
AIPERF_SCHEMA = "1.5"  # the profile_export_aiperf.json schema version whose fields are written
NS = 1_000_000_000
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


def _per_request(done: Done) -> dict[str, Any]:
    """One completed request in the peers' terms (seconds): TTFT, latency and ITL as rig defines them
    (rig.load.request_metrics); TPOT by vLLM's own definition, (latency - ttft) / (output_len - 1)
    on the server's token count, which is what its result files hold."""
    record = done.record
    first, latency = ttft(done), e2e(done)
    output = record.usage_tokens if record.usage_tokens is not None else len(record.chunks)
    return {"ttft": first, "latency": latency, "itl": itl(done), "output": output, "input": record.prompt_tokens or 0,
            "tpot": (latency - first) / (output - 1) if output > 1 else None}


def _stats_ms(values: list[float], percentiles: tuple[float, ...] = (99,)) -> dict[str, float]:
    array = np.asarray(values or [0.0], dtype=float) * 1000
    out = {"mean": float(array.mean()), "median": float(np.median(array)), "std": float(array.std())}
    out.update({f"p{p:g}": float(np.percentile(array, p)) for p in percentiles})
    return out


def _peaks(done: list[dict[str, Any]], starts: list[float]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests: per-second buckets from the first start."""
    if not done:
        return 0.0, 0
    origin = min(starts)
    ends = [s + d["latency"] for s, d in zip(starts, done)]
    buckets = int(np.ceil(max(ends) - origin)) + 1
    tokens, concurrent = np.zeros(buckets), np.zeros(buckets)
    for start, request in zip(starts, done):
        t = start + request["ttft"]
        tokens[int(t - origin)] += 1
        for gap in request["itl"]:
            t += gap
            tokens[int(t - origin)] += 1
        for second in range(int(start - origin), int(start + request["latency"] - origin) + 1):
            concurrent[second] += 1
    return float(tokens.max()), int(concurrent.max())


def vllm_result(summary: RunSummary, records: list[RequestRecord], window: Window) -> dict[str, Any]:
    ratio = run_tokens_per_chunk(records)
    views = [view for r in records if (view := Done.of(r, ratio)) is not None]
    complete = [view.record for view in views]
    failed = [r for r in records if r.error and r.error != "cut_by_window"]
    done = [_per_request(view) for view in views]
    duration = window.seconds
    total_in, total_out = sum(d["input"] for d in done), sum(d["output"] for d in done)
    scenario = summary.scenario
    arrivals = scenario.arrivals
    chat = scenario.endpoint != "completions"
    output_max, concurrent_max = _peaks(done, [r.t_send for r in complete])
    result: dict[str, Any] = {
        "date": dt.datetime.fromtimestamp(window.start).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if chat else "openai", "backend": "openai-chat" if chat else "openai",
        "label": "rig", "model_id": summary.provenance.served_model, "tokenizer_id": summary.provenance.served_model,
        "num_prompts": len(complete) + len(failed),
        "request_rate": arrivals.rate if arrivals else "inf", "burstiness": arrivals.burstiness if arrivals else 1.0,
        "max_concurrency": arrivals.max_concurrency if arrivals else scenario.users,
        "duration": duration, "completed": len(done), "failed": len(failed),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(done) / duration, "request_goodput": None,
        "output_throughput": total_out / duration, "total_token_throughput": (total_in + total_out) / duration,
        "max_output_tokens_per_s": output_max, "max_concurrent_requests": concurrent_max,
        "input_lens": [d["input"] for d in done], "output_lens": [d["output"] for d in done],
        "ttfts": [d["ttft"] for d in done], "itls": [d["itl"] for d in done],
        "generated_texts": [r.text or "" for r in complete], "errors": [""] * len(done),
        "start_times": [r.t_send for r in complete],
        # Metadata (vLLM's --metadata KEY=VALUE lands at the top level too): where the run came from.
        "rig_scenario": scenario.name, "rig_kind": scenario.kind, "rig_boot_id": summary.provenance.boot_id,
        "rig_recipe": summary.provenance.recipe, "rig_window_s": [window.start, window.end],
        "rig_usable": not summary.problems(), "rig_problems": summary.problems(),
    }
    for name, values in (("ttft", [d["ttft"] for d in done]), ("tpot", [d["tpot"] for d in done if d["tpot"] is not None]),
                         ("itl", [g for d in done for g in d["itl"]]), ("e2el", [d["latency"] for d in done])):
        for stat, value in _stats_ms(values).items():
            result[f"{stat}_{name}_ms"] = value
    return result


def _metric(value: Any, unit: str) -> dict[str, Any]:
    return {"value": value, "unit": unit}


def aiperf_records(summary: RunSummary, records: list[RequestRecord]) -> list[dict[str, Any]]:
    out = []
    ratio = run_tokens_per_chunk(records)
    for number, r in enumerate(sorted(records, key=lambda r: r.t_send)):
        view = Done.of(r, ratio)
        end = view.last if view is not None else (r.t_end or r.t_send)
        metadata = {"session_num": number, "x_request_id": r.id, "x_correlation_id": r.conversation or r.user,
                    "conversation_id": r.conversation or r.prompt, "turn_index": r.turn or 0,
                    "request_start_ns": int(r.t_send * NS), "request_ack_ns": None, "request_end_ns": int(end * NS),
                    "worker_id": r.process, "record_processor_id": "rig", "benchmark_phase": "profiling",
                    "was_cancelled": r.error == "cut_by_window",
                    "cancellation_time_ns": int((r.t_end or r.t_send) * NS) if r.error == "cut_by_window" else None}
        if view is not None:
            d = _per_request(view)
            ms = 1000.0
            metrics = {"input_sequence_length": _metric(d["input"], "tokens"),
                       "time_to_first_token": _metric(d["ttft"] * ms, "ms"),
                       "request_latency": _metric(d["latency"] * ms, "ms"),
                       "output_token_count": _metric(d["output"], "tokens"),
                       "output_sequence_length": _metric(d["output"], "tokens"),
                       "inter_chunk_latency": _metric([g * ms for g in d["itl"]], "ms")}
            if d["tpot"] is not None:
                metrics["inter_token_latency"] = _metric(d["tpot"] * ms, "ms")
                metrics["output_token_throughput_per_user"] = _metric(1.0 / d["tpot"] if d["tpot"] > 0 else None, "tokens/sec/user")
            out.append({"metadata": metadata, "metrics": metrics, "error": None})
        else:
            out.append({"metadata": metadata, "metrics": {"error_isl": _metric(r.prompt_tokens or 0, "tokens")},
                        "error": {"code": r.status or 0, "type": r.error or "incomplete", "message": (r.error_detail or r.error or "")[:300]}})
    return out


def _aggregate(values: list[float], unit: str) -> dict[str, Any]:
    array = np.asarray(values, dtype=float)
    if not len(array):
        return {"unit": unit}
    block: dict[str, Any] = {"unit": unit, "avg": float(array.mean()), "min": float(array.min()), "max": float(array.max())}
    block.update({f"p{p}": float(np.percentile(array, p)) for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)})
    block.update(std=float(array.std(ddof=1)) if len(array) > 1 else 0.0, count=len(array), sum=float(array.sum()))
    return block


def aiperf_aggregate(summary: RunSummary, rows: list[dict[str, Any]], window: Window) -> dict[str, Any]:
    good = [row["metrics"] for row in rows if row["error"] is None]

    def values(name: str) -> list[float]:
        return [m[name]["value"] for m in good if name in m and m[name]["value"] is not None]

    osl = values("output_sequence_length")
    return {"schema_version": AIPERF_SCHEMA, "aiperf_version": None, "benchmark_id": summary.provenance.boot_id,
            "start_time": dt.datetime.fromtimestamp(window.start, dt.UTC).isoformat(),
            "end_time": dt.datetime.fromtimestamp(window.end, dt.UTC).isoformat(), "was_cancelled": summary.interrupted,
            "request_latency": _aggregate(values("request_latency"), "ms"),
            "time_to_first_token": _aggregate(values("time_to_first_token"), "ms"),
            "inter_token_latency": _aggregate(values("inter_token_latency"), "ms"),
            "output_sequence_length": _aggregate(osl, "tokens"),
            "input_sequence_length": _aggregate(values("input_sequence_length"), "tokens"),
            "request_throughput": {"unit": "requests/sec", "avg": len(good) / window.seconds},
            "output_token_throughput": {"unit": "tokens/sec", "avg": sum(osl) / window.seconds},
            "request_count": {"unit": "requests", "avg": float(len(good))},
            "error_summary": [{"type": kind, "count": n} for kind, n in summary.metrics.requests.errors.items()],
            "rig": {"scenario": summary.scenario.name, "boot_id": summary.provenance.boot_id,
                    "usable": not summary.problems(), "problems": summary.problems()}}


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


class Peer(BaseModel):
    # The fields rig reads are typed strictly; a peer's other fields (its schema grows) are ignored.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


# The number types of rig.typed (finite, bounded), as the peers write them.
Nanoseconds = Annotated[StrictInt, Field(ge=0, le=int(MAX_TIME_S) * NS)]  # since the epoch


class VllmResult(Peer):
    completed: Count
    duration: Annotated[Seconds, Field(gt=0)]
    input_lens: list[Tokens] = Field(max_length=1_000_000)
    output_lens: list[Tokens] = Field(max_length=1_000_000)
    ttfts: list[Seconds] = Field(max_length=1_000_000)
    itls: list[list[Seconds]] = Field(max_length=1_000_000)
    errors: list[StrictStr | None] = Field(max_length=1_000_000)
    start_times: list[Epoch] | None = None
    model_id: StrictStr | None = None
    backend: StrictStr | None = None


class AiperfValue(Peer):
    value: Finite | list[Finite] | None
    unit: StrictStr


class AiperfMetadata(Peer):
    x_request_id: StrictStr = Field(max_length=200)
    x_correlation_id: StrictStr | None = Field(None, max_length=200)
    conversation_id: StrictStr | None = Field(None, max_length=200)
    turn_index: Count = 0
    request_start_ns: Nanoseconds
    request_end_ns: Nanoseconds | None = None
    worker_id: StrictStr | None = Field(None, max_length=200)
    benchmark_phase: StrictStr = "profiling"
    was_cancelled: StrictBool = False

    @field_validator("request_end_ns")
    @classmethod
    def _ends_after_it_starts(cls, end: int | None, info: ValidationInfo) -> int | None:
        start = info.data.get("request_start_ns")
        if end is not None and start is not None and end < start:
            raise ValueError("before request_start_ns: a request ends after it starts")
        return end


class AiperfError(Peer):
    code: StrictInt | None = None
    type: StrictStr | None = None
    message: StrictStr | None = None


class AiperfRecord(Peer):
    metadata: AiperfMetadata
    metrics: dict[StrictStr, AiperfValue] | None = None
    error: AiperfError | None = None


def _detect(data: bytes, where: str) -> str:
    head = data.lstrip()[:1]
    if head == b"{":
        first = data.split(b"\n", 1)[0]
        return "aiperf" if b'"metadata"' in first else "vllm"
    raise RigError(where, "(file)", "neither a vLLM result JSON nor an AIPerf profile_export.jsonl",
                   "pass vllm bench serve's --save-result --save-detailed file, or AIPerf's profile_export.jsonl")


def _vllm_records(data: bytes, where: str) -> tuple[list[RequestRecord], float | None]:
    try:
        result = VllmResult.model_validate(strict_json(data))
    except ValueError as error:
        if isinstance(error, ValidationError):
            field, message = first_problem(error)
            if field in ("input_lens", "ttfts", "itls", "errors", "output_lens") and error.errors()[0]["type"] == "missing":
                raise RigError(where, field, "the file has no per-request data",
                               "re-run vllm bench serve with --save-result --save-detailed: rig computes from requests") from None
            raise RigError(where, field, message, "pass the file vllm bench serve wrote, unchanged") from None
        raise RigError(where, "(file)", f"not valid JSON ({error})", "pass the file vllm bench serve wrote, unchanged") from None
    lengths = {len(result.input_lens), len(result.output_lens), len(result.ttfts), len(result.itls), len(result.errors)}
    if len(lengths) != 1 or (result.start_times is not None and len(result.start_times) not in lengths):
        raise RigError(where, "input_lens/output_lens/ttfts/itls/errors", "the per-request lists differ in length",
                       "pass the file vllm bench serve wrote, unchanged")
    succeeded = sum(1 for error in result.errors if not error)
    if result.completed != succeeded:
        # vLLM's lists hold every request and `completed` counts those without an error.
        raise Invalid(where, "completed", f"{result.completed} completed, but {succeeded} requests have no error",
                      "pass the file vllm bench serve wrote, unchanged")
    records = []
    for i, (inp, out, first_s, gaps, error) in enumerate(zip(result.input_lens, result.output_lens, result.ttfts, result.itls,
                                                             result.errors)):
        # Without start times every request starts at 0: per-request figures are exact, and
        # tokens over the run's duration give vLLM's own output_throughput.
        start = float(result.start_times[i]) if result.start_times is not None else 0.0
        record = RequestRecord(id=f"vllm-{i}", process="vllm", user=f"vllm-{i}", prompt=f"vllm-{i}", t_send=start)
        if error:
            record.error, record.error_detail = "peer_error", error[:300]
        else:
            first = start + first_s
            record.chunks = [first, *(first + elapsed for elapsed in itertools.accumulate(float(gap) for gap in gaps))]
            record.t_first, record.t_last, record.t_end = first, record.chunks[-1], record.chunks[-1]
            record.usage = {"prompt_tokens": inp, "completion_tokens": out}
            record.finish_reason = "imported"
        records.append(_plausible(record, where, f"request {i}", "pass the file vllm bench serve wrote, unchanged"))
    return records, float(result.duration)


def _plausible(record: RequestRecord, where: str, field: str, fix: str) -> RequestRecord:
    """A record built from a peer's row holds to what rig's own reader holds a stored record to (times
    in order, counts non-negative), so a bad row is refused here, naming the peer's file and row,
    not later in rig's copy of it."""
    try:
        RequestRecord.model_validate(record.model_dump(), context=STORED)
    except ValidationError as error:
        raise Invalid(where, field, first_problem(error)[1], fix) from None
    return record


def _tokens(value: float, where: str, field: str) -> int:
    """A peer's token count: a whole number of at most MAX_TOKENS (a count of 1e300 is no count)."""
    if value != int(value) or not 0 <= value <= MAX_TOKENS:
        raise Invalid(where, field, f"{value:g} is not a token count (a whole number 0..{MAX_TOKENS})",
                      "pass the profile_export.jsonl AIPerf wrote, unchanged")
    return int(value)


def _aiperf_records(data: bytes, where: str) -> tuple[list[RequestRecord], float | None]:
    records = []
    for number, raw in enumerate(io.BytesIO(data), start=1):  # a line at a time: no second copy of the file as text or lines
        try:
            line = raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as error:
            raise Damaged(where, f"line {number} byte {error.start + 1}", "not UTF-8 text",
                          "pass the profile_export.jsonl AIPerf wrote, unchanged") from None
        if not line.strip():
            continue
        try:
            row = AiperfRecord.model_validate(strict_json(line))
        except ValidationError as error:
            field, message = first_problem(error)
            raise Invalid(where, f"line {number}: {field}", message, "pass the profile_export.jsonl AIPerf wrote, unchanged") from None
        except ValueError as error:
            raise Damaged(where, f"line {number}", f"not valid JSON ({error})", "pass the profile_export.jsonl AIPerf wrote") from None
        meta = row.metadata
        if meta.benchmark_phase != "profiling":
            continue  # warmup requests are not measurements
        start = meta.request_start_ns / NS
        record = RequestRecord(id=meta.x_request_id, process=meta.worker_id or "aiperf", user=meta.x_correlation_id or meta.x_request_id,
                               prompt=meta.conversation_id or meta.x_request_id, t_send=start, turn=meta.turn_index,
                               conversation=meta.x_correlation_id)
        metrics = row.metrics or {}

        def number_of(name: str, metrics: dict[str, AiperfValue] = metrics) -> float | None:
            value = metrics.get(name)
            return float(value.value) if value is not None and isinstance(value.value, (int, float)) else None

        ttft = number_of("time_to_first_token")
        if row.error is not None or meta.was_cancelled or ttft is None:
            record.error = "cut_by_window" if meta.was_cancelled else f"peer_{(row.error.type if row.error else None) or 'error'}"
            record.error_detail = (row.error.message if row.error else None) or None
        else:
            gaps = metrics.get("inter_chunk_latency")
            chunk_gaps = [float(g) / 1000 for g in gaps.value] if gaps is not None and isinstance(gaps.value, list) else []
            first = start + ttft / 1000
            record.chunks = [first]
            for gap in chunk_gaps:
                record.chunks.append(record.chunks[-1] + gap)
            latency = number_of("request_latency")
            record.t_first, record.t_last = first, record.chunks[-1] if chunk_gaps or latency is None else start + latency / 1000
            record.t_end = (meta.request_end_ns / NS) if meta.request_end_ns else record.t_last
            output = number_of("output_sequence_length") or number_of("output_token_count")
            inputs = number_of("input_sequence_length")
            record.usage = {k: _tokens(v, where, f"line {number}: metrics.{k}")
                            for k, v in (("prompt_tokens", inputs), ("completion_tokens", output)) if v is not None}
            record.finish_reason = "imported"
        records.append(_plausible(record, where, f"line {number}", "pass the profile_export.jsonl AIPerf wrote, unchanged"))
    if not records:
        raise RigError(where, "(file)", "holds no profiling records", "pass the profile_export.jsonl of a finished AIPerf run")
    return records, None


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
    records, duration = (_vllm_records if tool == "vllm" else _aiperf_records)(data, where)
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
