"""SGLang beside vLLM: one table from the GPU test's raw results of each engine, read with rig's own
summary reader, so the table is printed, not typed.

    python3 benchmarks/gpu-host/engines_table.py GPU_TEST_DIR ...   # e.g. rig-results/gpu-test/llama8b-*-tp1

Each GPU_TEST_DIR holds what `pytest -m gpu tests/gpu/test_engines_gpu.py` copied (RIG_GPU_TEST_RESULTS):
boots/<id>/boot.json and <recipe>/<run>/<scenario>/summary.json. One column per directory; a figure
the client could move beyond its limit is marked "(client)", as rig's loadtest table marks it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rig.load.summary import RunSummary


@dataclass(frozen=True)
class Row:
    label: str
    scenario: str
    client_figure: str | None  # the client bound that covers it (None: not a client-timed figure)
    value: Callable[[RunSummary], float | None]
    digits: int


def _gpu(summary: RunSummary, key: str) -> float | None:
    gpu = summary.observations.gpu if summary.observations else None
    return None if gpu is None else getattr(gpu, key, None)


ROWS = (
    Row("prose-c1 decode tok/s per user", "prose-c1", "user_decode_tok_s", lambda s: s.metrics.user_decode_tok_s.token_weighted, 2),
    Row("prose-c1 TPOT p50 ms", "prose-c1", "tpot_p50_ms", lambda s: 1e3 * s.metrics.tpot_s.p50 if s.metrics.tpot_s.p50 else None, 3),
    Row("prose-c1 TTFT p50 ms (64-token prompt)", "prose-c1", "ttft_p50_ms", lambda s: 1e3 * s.metrics.ttft_s.p50 if s.metrics.ttft_s.p50 else None, 2),
    Row("prose-c1 J per output token", "prose-c1", None, lambda s: _gpu(s, "j_per_output_token"), 3),
    Row("decode-ctx3k decode tok/s per user", "decode-ctx3k", "user_decode_tok_s", lambda s: s.metrics.user_decode_tok_s.token_weighted, 2),
    Row("decode-ctx3k TTFT p50 ms (3k prompt)", "decode-ctx3k", "ttft_p50_ms", lambda s: 1e3 * s.metrics.ttft_s.p50 if s.metrics.ttft_s.p50 else None, 2),
    Row("prefill-8k prefill tok/s", "prefill-8k", "prefill_tok_s", lambda s: s.metrics.prefill_tok_s.token_weighted, 0),
    Row("prefill-8k TTFT p50 ms", "prefill-8k", "ttft_p50_ms", lambda s: 1e3 * s.metrics.ttft_s.p50 if s.metrics.ttft_s.p50 else None, 1),
    Row("prefill-8k J per output token", "prefill-8k", None, lambda s: _gpu(s, "j_per_output_token"), 1),
    Row("decode-c32 decode tok/s per user", "decode-c32", "user_decode_tok_s", lambda s: s.metrics.user_decode_tok_s.token_weighted, 2),
    Row("decode-c32 output tok/s", "decode-c32", "output_tok_s", lambda s: s.metrics.output_tok_s, 0),
    Row("decode-c32 J per output token", "decode-c32", None, lambda s: _gpu(s, "j_per_output_token"), 4),
    Row("decode-c32 mean power W", "decode-c32", None, lambda s: _gpu(s, "power_w_mean_total"), 0),
)


def _cell(summary: RunSummary | None, row: Row) -> str:
    if summary is None:
        return "not run"
    value = row.value(summary)
    if value is None:
        return "-"
    text = f"{value:,.{row.digits}f}"
    bound = summary.client.figures.get(row.client_figure) if row.client_figure else None
    return f"{text} (client)" if bound is not None and not bound.holds else text


def column(directory: Path) -> tuple[str, dict[str, RunSummary], str]:
    """The engine's name, its measured runs by scenario, and its boot line (the one boot of the test)."""
    runs = {path.parent.name: RunSummary.read(path.parent) for path in sorted(directory.glob("*/*/*/summary.json"))
            if not path.parent.name.startswith("warmup-")}
    boots = [json.loads(path.read_text()) for path in sorted(directory.glob("boots/*/boot.json"))]
    engine = next((s.provenance.engine for s in runs.values()), directory.name)
    boot = "; ".join(f"{b['boot_id']}: healthy {b.get('healthy_after_s') or 0:.1f} s, caches {b['compile_cache'].get('state')}, "
                     f"grew {', '.join(f'{k} +{v}' for k, v in sorted((b['compile_cache'].get('grew') or {}).items())) or 'nothing'}"
                     for b in boots)
    return str(engine), runs, boot


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: engines_table.py GPU_TEST_DIR ...")
    columns = [column(Path(arg)) for arg in sys.argv[1:]]
    print("| figure | " + " | ".join(name for name, _, _ in columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for row in ROWS:
        print(f"| {row.label} | " + " | ".join(_cell(runs.get(row.scenario), row) for _, runs, _ in columns) + " |")
    print()
    for name, _, boot in columns:
        print(f"{name}: {boot}")


if __name__ == "__main__":
    main()
