"""AIPerf (ai-dynamo/aiperf): `profile_export.jsonl` (per request `metadata` with
`request_start_ns`/`request_end_ns`, `metrics` as {value, unit} with `time_to_first_token`,
`inter_chunk_latency`, ... in ms, `error`) and `profile_export_aiperf.json` (per metric
unit/avg/min/max/p*/std/count/sum), written from a rig run; the records file read back into rig's
records a line at a time."""

from __future__ import annotations

import datetime as dt
import io
from typing import Annotated, Any

import numpy as np
from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationError, ValidationInfo, field_validator

from rig.errors import Damaged, Invalid, RigError
from rig.load.figures import AIPERF_PERCENTILES, PEER_SERIES
from rig.load.peers.common import NS, Peer, PeerRequest, plausible
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, run_tokens_per_chunk
from rig.load.summary import RunSummary, Window
from rig.strict_yaml import strict_json
from rig.typed import MAX_TIME_S, MAX_TOKENS, Count, Finite, first_problem

AIPERF_RECORDS = "profile_export.jsonl"
AIPERF_AGGREGATE = "profile_export_aiperf.json"
AIPERF_SCHEMA = "1.5"  # the profile_export_aiperf.json schema version whose fields are written
FIX = "pass the profile_export.jsonl AIPerf wrote, unchanged"


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
            d = PeerRequest.of(view)
            ms = 1000.0
            metrics = {"input_sequence_length": _metric(d.input, "tokens"),
                       "output_token_count": _metric(d.output, "tokens"),
                       "output_sequence_length": _metric(d.output, "tokens"),
                       "inter_chunk_latency": _metric([g * ms for g in d.itl], "ms")}
            for samples, value in (("ttft", d.ttft), ("e2e", d.latency), ("tpot", d.tpot)):
                if value is not None:  # the registry's series under AIPerf's names
                    metrics[str(PEER_SERIES[samples].aiperf)] = _metric(value * ms, "ms")
            if d.tpot is not None:
                metrics["output_token_throughput_per_user"] = _metric(1.0 / d.tpot if d.tpot > 0 else None, "tokens/sec/user")
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
    block.update({f"p{p}": float(np.percentile(array, p)) for p in AIPERF_PERCENTILES})
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
            **{peer.aiperf: _aggregate(values(peer.aiperf), "ms") for peer in PEER_SERIES.values() if peer.aiperf},
            "output_sequence_length": _aggregate(osl, "tokens"),
            "input_sequence_length": _aggregate(values("input_sequence_length"), "tokens"),
            "request_throughput": {"unit": "requests/sec", "avg": len(good) / window.seconds},
            "output_token_throughput": {"unit": "tokens/sec", "avg": sum(osl) / window.seconds},
            "request_count": {"unit": "requests", "avg": float(len(good))},
            "error_summary": [{"type": kind, "count": n} for kind, n in summary.metrics.requests.errors.items()],
            "rig": {"scenario": summary.scenario.name, "boot_id": summary.provenance.boot_id,
                    "usable": not summary.problems(), "problems": summary.problems()}}


# The number types of rig.typed (finite, bounded), as the peers write them.
Nanoseconds = Annotated[StrictInt, Field(ge=0, le=int(MAX_TIME_S) * NS)]  # since the epoch


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


def _tokens(value: float, where: str, field: str) -> int:
    """A peer's token count: a whole number of at most MAX_TOKENS (a count of 1e300 is no count)."""
    if value != int(value) or not 0 <= value <= MAX_TOKENS:
        raise Invalid(where, field, f"{value:g} is not a token count (a whole number 0..{MAX_TOKENS})", FIX)
    return int(value)


def read_aiperf(data: bytes, where: str) -> tuple[list[RequestRecord], float | None]:
    """The file's profiling requests as rig's records (warmup rows skipped); no duration of its own."""
    records = []
    for number, raw in enumerate(io.BytesIO(data), start=1):  # a line at a time: no second copy of the file as text or lines
        try:
            line = raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as error:
            raise Damaged(where, f"line {number} byte {error.start + 1}", "not UTF-8 text", FIX) from None
        if not line.strip():
            continue
        try:
            row = AiperfRecord.model_validate(strict_json(line))
        except ValidationError as error:
            field, message = first_problem(error)
            raise Invalid(where, f"line {number}: {field}", message, FIX) from None
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

        ttft = number_of(str(PEER_SERIES["ttft"].aiperf))
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
            latency = number_of(str(PEER_SERIES["e2e"].aiperf))
            record.t_first, record.t_last = first, record.chunks[-1] if chunk_gaps or latency is None else start + latency / 1000
            record.t_end = (meta.request_end_ns / NS) if meta.request_end_ns else record.t_last
            output = number_of("output_sequence_length") or number_of("output_token_count")
            inputs = number_of("input_sequence_length")
            record.usage = {k: _tokens(v, where, f"line {number}: metrics.{k}")
                            for k, v in (("prompt_tokens", inputs), ("completion_tokens", output)) if v is not None}
            record.finish_reason = "imported"
        records.append(plausible(record, where, f"line {number}", FIX))
    if not records:
        raise RigError(where, "(file)", "holds no profiling records", "pass the profile_export.jsonl of a finished AIPerf run")
    return records, None
