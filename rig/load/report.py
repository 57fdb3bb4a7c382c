"""Load-test output: summary.json (schema-versioned, with provenance), summary.csv, summary.md."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

COLUMNS = [
    ("scenario", lambda s: s["scenario"]["name"] + (" (warmup)" if s["warmup"] else "")),
    ("users", lambda s: s["scenario"]["users"]),
    ("done", lambda s: s["metrics"]["requests"]["completed"]),
    ("errors", lambda s: sum(n for k, n in s["metrics"]["requests"]["errors"].items() if k != "cut_by_window")),
    ("cut", lambda s: s["metrics"]["requests"]["cut_by_window"]),
    ("user tok/s", lambda s: s["metrics"]["user_decode_tok_s"]["mean"]),
    ("output tok/s", lambda s: s["metrics"]["output_tok_s"]),
    ("prefill tok/s", lambda s: s["metrics"]["prefill_tok_s"]["mean"]),
    ("TTFT p50 ms", lambda s: _ms(s["metrics"]["ttft_s"]["p50"])),
    ("TTFT p99 ms", lambda s: _ms(s["metrics"]["ttft_s"]["p99"])),
    ("ITL p50 ms", lambda s: _ms(s["metrics"]["itl_s"]["p50"])),
    ("TPOT mean ms", lambda s: _ms(s["metrics"]["tpot_s"]["mean"])),
    ("E2E p90 s", lambda s: s["metrics"]["e2e_s"]["p90"]),
    ("client", lambda s: "ok" if s["client"]["valid"] else "INVALID: " + "; ".join(s["client"]["reasons"])),
]


def _ms(value: float | None) -> float | None:
    return None if value is None else 1000 * value


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def row(summary: dict[str, Any]) -> list[Any]:
    return [get(summary) for _, get in COLUMNS]


def markdown_table(summaries: list[dict[str, Any]]) -> str:
    header = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    rule = "|" + "|".join(" --- " for _ in COLUMNS) + "|"
    lines = [header, rule] + ["| " + " | ".join(_fmt(v) for v in row(s)) + " |" for s in summaries]
    return "\n".join(lines)


def notes(summary: dict[str, Any]) -> list[str]:
    out = []
    tokens = summary["metrics"]["tokens"]
    if tokens["usage_vs_chunks_mismatched_requests"]:
        out.append(f"{summary['scenario']['name']}: usage and chunk counts differ by more than {tokens['tolerance']:.0%} in "
                   f"{tokens['usage_vs_chunks_mismatched_requests']} request(s) (mean {tokens['usage_vs_chunks_mean_difference']:+.1f} "
                   "tokens): the server puts several tokens in some chunks; ITL is per chunk, token rates use usage")
    if tokens.get("usage_vs_tokenizer_mismatched_requests"):
        out.append(f"{summary['scenario']['name']}: usage and a re-tokenisation of the streamed text differ beyond "
                   f"{tokens['tolerance']:.0%} in {tokens['usage_vs_tokenizer_mismatched_requests']} request(s) (mean "
                   f"{tokens['usage_vs_tokenizer_mean_difference']:+.1f} tokens; decoded text does not always re-encode to the same tokens)")
    if summary.get("interrupted"):
        out.append(f"{summary['scenario']['name']}: interrupted; the summary covers what was measured")
    return out


def write_run(out_dir: Path, summary: dict[str, Any]) -> None:
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    with open(out_dir / "summary.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([name for name, _ in COLUMNS])
        writer.writerow(row(summary))
    provenance = summary["provenance"]
    text = [markdown_table([summary]), "",
            f"recipe {provenance['recipe']}{':' + provenance['variant'] if provenance['variant'] else ''}, boot {provenance['boot_id']}, "
            f"engine {provenance['engine']}, host {provenance['host']['cpu']} x{provenance['host']['cpu_count']}, "
            f"GPUs {', '.join(provenance['host']['gpus']) or 'none'}"]
    text += notes(summary)
    (out_dir / "summary.md").write_text("\n".join(text) + "\n")
