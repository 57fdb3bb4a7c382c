"""Load-test runs and kernel benchmarks as evidence.

- `load run`: a run directory as `rig loadtest` wrote it (records-*.jsonl, client-*.json,
  dispatcher-*.json, window.jsonl, server-metrics.jsonl, gpu-samples.jsonl, and its summary.json for
  what was configured: the scenario and the serving GPUs). Every figure is computed again from the
  raw files by the functions that wrote the summary (rig.loadrun.runner.run_scenario's steps): the
  steady window, the metrics, each figure's client bound by the current rules, the client verdict,
  the server's /metrics and the GPUs over the window.
- `kernelbench`: kernelbench.json as `rig kernelbench` wrote it. Each row's time is the median of
  its interleaved samples again, its change against the production row recomputed; the bitwise
  checks are read as the benchmark wrote them (they need the GPU).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from pydantic import ValidationError

from rig.errors import Damaged
from rig.load.client_error import client_bounds
from rig.load.figures import HEADLINE, ITL_P50, OUTPUT, TPOT_P50, TTFT_P50, USER_DECODE
from rig.load.metrics import client_lag, client_verdict, responsive_end, steady_window, summarize
from rig.load.records import read_records
from rig.load.scenarios import load_scenario
from rig.load.summary import RunSummary
from rig.loadrun.writeup import GPU_SAMPLES, SERVER_METRICS, read_clients, read_dispatcher, read_window_events, token_agreement
from rig.observe.gpu import summarize_gpu_samples
from rig.observe.server_metrics import summarize_server_metrics
from rig.strict_yaml import load_json_file
from rig.validation.figures import Kind, bound_text, table_number

KERNELBENCH_MAX_BYTES = 8 << 20


class LoadRunKind(Kind):
    name = "load run"
    method = ("rig's run summary computed again from the run's raw files: rig.load.metrics.steady_window and summarize, "
              "rig.load.client_error.client_bounds (the current rules), client_verdict, the server's /metrics and the GPU "
              "samples over the window")

    def compute(self, directory: Path) -> dict[str, str]:
        stored = RunSummary.read(directory)  # what the run was configured with: the scenario, the serving GPUs
        scenario = load_scenario(stored.scenario.name)
        if scenario.kind != stored.scenario.kind:
            raise Damaged(str(directory / "summary.json"), "scenario.kind", f"{stored.scenario.kind!r} is not the kind of "
                          f"loadtests/scenarios/{scenario.name}.yaml ({scenario.kind!r})", "recompute with the scenario it ran")
        records, raw_clients = read_records(directory), read_clients(directory)
        events = read_window_events(directory)
        if "stopping" in events:
            events["stopping"] = responsive_end(raw_clients, events["stopping"])
        window = steady_window(records, events, scenario.ramp_s, stored.scenario.users)
        metrics = summarize(records, window)
        headline = HEADLINE[scenario.kind].name
        judged = stored.client.figures.get(headline)  # the limit the run was held to (5% at small sizes)
        limit = judged.limit if judged is not None else scenario.client_error_limit
        think = scenario.conversation.think_time_s if scenario.conversation else 0.0
        bounds = client_bounds(records, window, raw_clients, limit, read_dispatcher(directory), think)
        verdict = client_verdict([client_lag(c, window) for c in raw_clients], bounds, headline)
        out = {
            "window": f"{window.seconds:.1f} s ({'steady' if window.steady else 'not steady'})",
            "completed": f"{metrics.requests.completed:,}",
            "errors": str(sum(n for k, n in metrics.requests.errors.items() if k != "cut_by_window")),
            "client verdict": "VALID" if verdict.valid else "INVALID",
            "client lag p99 ms (worst process)": f"{verdict.lag_p99_ms or 0:.2f}",
            "client CPU (busiest process)": f"{verdict.cpu_percent_mean_max or 0:.0f}%",
            "client processes": str(verdict.processes),
        }
        for figure in (OUTPUT, USER_DECODE, TTFT_P50, ITL_P50, TPOT_P50):  # the run figures claims quote
            value = figure.read(metrics)
            if value is not None:
                out[figure.name] = table_number(value)
        out |= {f"client bound {name}": bound_text(bound.bound) for name, bound in bounds.items()}
        server = summarize_server_metrics(directory / SERVER_METRICS, (window.start, window.end))
        for name, label in (("running_requests", "running mean"), ("waiting_requests", "waiting mean")):
            figure = server.metrics.get(name)
            if figure is not None and figure.mean is not None:
                out[label] = f"{figure.mean:,.0f}"
        agreement = token_agreement(server, records)
        if agreement is not None:
            out["client vs server output tokens"] = f"{100 * agreement.difference:+.2f}%"
        out |= self._gpu(directory, stored, window.start, window.end, metrics.output_tok_s * window.seconds)
        return out

    @staticmethod
    def _gpu(directory: Path, stored: RunSummary, start: float, end: float, tokens: float) -> dict[str, str]:
        if not (directory / GPU_SAMPLES).exists():
            return {}
        serving = stored.observations.gpu.serving_gpus if stored.observations.gpu else None
        gpu = summarize_gpu_samples(directory / GPU_SAMPLES, (start, end), tokens, serving)
        out = {}
        busy = [g.util_gpu_pct.mean for g in gpu.gpus.values() if g.serving and g.util_gpu_pct is not None]
        if busy:
            out["GPU busy"] = f"{statistics.fmean(busy):.1f}%"
        if gpu.power_w_mean_total is not None:
            out["GPU power"] = f"{gpu.power_w_mean_total:.0f} W"
        if gpu.j_per_output_token is not None:
            out["J per output token"] = f"{gpu.j_per_output_token:.3g}"
        return out


class KernelbenchKind(Kind):
    name = "kernelbench"
    method = ("each row's median of its interleaved samples again (rig.kernelbench.bench's statistic) and its change "
              "against the production row; the bitwise checks as kernelbench.json holds them")

    def compute(self, directory: Path) -> dict[str, str]:
        from rig.kernelbench.bench import BitwiseCheck, Row  # torch: the kernelbench extra

        path = directory / "kernelbench.json"
        report = load_json_file(path, KERNELBENCH_MAX_BYTES, str(path))
        shapes = report.get("shapes") if isinstance(report, dict) else None
        if not isinstance(shapes, list):
            raise Damaged(str(path), "shapes", "no list of shapes", "pack the kernelbench.json rig kernelbench wrote")
        out: dict[str, str] = {}
        differing = 0
        for index, shape in enumerate(shapes):
            where = f"shapes.{index}"
            if not isinstance(shape, dict) or set(shape) != {"m", "rows", "lossless"} or not isinstance(shape["m"], int):
                raise Damaged(str(path), where, "not a shape of rig kernelbench (m, rows, lossless)", "pack the file it wrote")
            try:
                rows = [Row.model_validate_json(json.dumps(row)) for row in shape["rows"]]
                checks = [BitwiseCheck.model_validate_json(json.dumps(check)) for check in shape["lossless"].values()]
            except (ValidationError, AttributeError, TypeError) as error:
                raise Damaged(str(path), where, f"not what rig kernelbench writes ({type(error).__name__})", "pack the file it wrote") from None
            m = shape["m"]
            timed = [(row, statistics.median(row.samples_us)) for row in rows if row.samples_us]
            production = next((median for row, median in timed if row.role == "production"), None)
            for row, median in timed:
                out[f"{row.label} M={m}"] = f"{median:.2f} us"
                if production and row.role != "production":
                    out[f"{row.label} vs production M={m}"] = f"{100 * (median - production) / production:+.1f}%"
            for check in checks:
                if check.differing is None:
                    raise Damaged(str(path), f"{where}.lossless", "a bitwise check that compared nothing", "rerun rig kernelbench")
                differing += check.differing
        out["padded vs unpadded: differing elements"] = str(differing)
        return out
