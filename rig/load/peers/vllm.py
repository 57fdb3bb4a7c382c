"""vLLM's benchmark client (`vllm bench serve --save-result --save-detailed`): its result JSON, written
from a rig run and read back into rig's records.

The file holds `completed`, `failed`, `duration`, `request_throughput`, `output_throughput`,
`total_token_throughput`, mean/median/std/p99 of `ttft`/`tpot`/`itl`/`e2el` in ms
(TPOT = (latency - ttft) / (output_len - 1)), and per request `input_lens`, `output_lens`, `ttfts`,
`itls` (seconds), `generated_texts`, `errors`."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Annotated, Any

import numpy as np
from pydantic import Field, StrictStr, ValidationError

from rig.errors import Invalid, RigError
from rig.load.figures import PEER_SERIES, VLLM_PERCENTILES
from rig.load.peers.common import Peer, PeerRequest, plausible
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, run_tokens_per_chunk
from rig.load.summary import RunSummary, Window
from rig.strict_yaml import strict_json
from rig.typed import Count, Epoch, Seconds, Tokens, first_problem

VLLM_FILE = "vllm-result.json"
FIX = "pass the file vllm bench serve wrote, unchanged"


def _stats_ms(values: list[float], percentiles: tuple[float, ...]) -> dict[str, float]:
    array = np.asarray(values or [0.0], dtype=float) * 1000
    out = {"mean": float(array.mean()), "median": float(np.median(array)), "std": float(array.std())}
    out.update({f"p{p:g}": float(np.percentile(array, p)) for p in percentiles})
    return out


def _peaks(done: list[PeerRequest], starts: list[float]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests: per-second buckets from the first start."""
    if not done:
        return 0.0, 0
    origin = min(starts)
    ends = [s + d.latency for s, d in zip(starts, done)]
    buckets = int(np.ceil(max(ends) - origin)) + 1
    tokens, concurrent = np.zeros(buckets), np.zeros(buckets)
    for start, request in zip(starts, done):
        t = start + request.ttft
        tokens[int(t - origin)] += 1
        for gap in request.itl:
            t += gap
            tokens[int(t - origin)] += 1
        for second in range(int(start - origin), int(start + request.latency - origin) + 1):
            concurrent[second] += 1
    return float(tokens.max()), int(concurrent.max())


def vllm_result(summary: RunSummary, records: list[RequestRecord], window: Window) -> dict[str, Any]:
    ratio = run_tokens_per_chunk(records)
    views = [view for r in records if (view := Done.of(r, ratio)) is not None]
    complete = [view.record for view in views]
    failed = [r for r in records if r.error and r.error != "cut_by_window"]
    done = [PeerRequest.of(view) for view in views]
    duration = window.seconds
    total_in, total_out = sum(d.input for d in done), sum(d.output for d in done)
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
        "input_lens": [d.input for d in done], "output_lens": [d.output for d in done],
        "ttfts": [d.ttft for d in done], "itls": [d.itl for d in done],
        "generated_texts": [r.text or "" for r in complete], "errors": [""] * len(done),
        "start_times": [r.t_send for r in complete],
        # Metadata (vLLM's --metadata KEY=VALUE lands at the top level too): where the run came from.
        "rig_scenario": scenario.name, "rig_kind": scenario.kind, "rig_boot_id": summary.provenance.boot_id,
        "rig_recipe": summary.provenance.recipe, "rig_window_s": [window.start, window.end],
        "rig_usable": not summary.problems(), "rig_problems": summary.problems(),
    }
    series = {"ttft": [d.ttft for d in done], "tpot": [d.tpot for d in done if d.tpot is not None],
              "itl": [g for d in done for g in d.itl], "e2e": [d.latency for d in done]}
    for samples, peer in PEER_SERIES.items():  # the registry's series, with its figures' percentiles
        for stat, value in _stats_ms(series[samples], VLLM_PERCENTILES[samples]).items():
            result[f"{stat}_{peer.vllm}_ms"] = value
    return result


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


def read_vllm(data: bytes, where: str) -> tuple[list[RequestRecord], float | None]:
    """The file's requests as rig's records, and the run's duration (vLLM's own, for its throughput)."""
    try:
        result = VllmResult.model_validate(strict_json(data))
    except ValueError as error:
        if isinstance(error, ValidationError):
            field, message = first_problem(error)
            if field in ("input_lens", "ttfts", "itls", "errors", "output_lens") and error.errors()[0]["type"] == "missing":
                raise RigError(where, field, "the file has no per-request data",
                               "re-run vllm bench serve with --save-result --save-detailed: rig computes from requests") from None
            raise RigError(where, field, message, FIX) from None
        raise RigError(where, "(file)", f"not valid JSON ({error})", FIX) from None
    lengths = {len(result.input_lens), len(result.output_lens), len(result.ttfts), len(result.itls), len(result.errors)}
    if len(lengths) != 1 or (result.start_times is not None and len(result.start_times) not in lengths):
        raise RigError(where, "input_lens/output_lens/ttfts/itls/errors", "the per-request lists differ in length", FIX)
    succeeded = sum(1 for error in result.errors if not error)
    if result.completed != succeeded:
        # vLLM's lists hold every request and `completed` counts those without an error.
        raise Invalid(where, "completed", f"{result.completed} completed, but {succeeded} requests have no error", FIX)
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
        records.append(plausible(record, where, f"request {i}", FIX))
    return records, float(result.duration)
