"""One line per boot of a results directory, for the boot-state study: what the caches held, what the
engine's log says it did, the KV cache it sized, the SM clock and power during the measured windows,
and each measured round's headline.

    python3 benchmarks/gpu-host/boot_table.py RESULTS_DIR        # e.g. an unpacked rig-results/

It reads what rig wrote (boots/<id>/boot.json and server.log, each run's summary.json) and nothing
else; a boot's runs are found through its runs.jsonl.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
COMPILE_S = re.compile(r"torch\.compile took ([\d.]+) s in total")
GRAPHS_S = re.compile(r"Graph capturing finished in (\d+) secs")


def _first(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    return match.group(1) if match else "-"


def boot_line(root: Path, boot_dir: Path) -> str | None:
    record = json.loads((boot_dir / "boot.json").read_text())
    written_root = Path(record["boot_dir"]).parent.parent  # where the results lived when rig wrote them
    log = (boot_dir / "server.log").read_text(errors="replace") if (boot_dir / "server.log").exists() else ""
    cache = record.get("compile_cache") or {}
    rounds, clocks, power = [], [], []
    runs_file = boot_dir / "runs.jsonl"
    for line in runs_file.read_text().splitlines() if runs_file.exists() else []:
        run = json.loads(line)
        summary_path = root / Path(run["dir"]).relative_to(written_root) / "summary.json"
        if run.get("warmup") or not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text())
        rate = (summary["metrics"].get("user_decode_tok_s") or {}).get("token_weighted")
        rounds.append(f"{rate:.2f}" if rate else "-")
        for gpu in ((summary.get("observations") or {}).get("gpu") or {}).get("gpus", {}).values():
            if gpu.get("serving") and gpu.get("sm_mhz"):
                clocks.append(gpu["sm_mhz"]["mean"])
                power.append((gpu.get("power_w") or {}).get("mean") or 0.0)
    grew = ",".join(f"{k}+{v}" for k, v in sorted((cache.get("grew") or {}).items())) or "none"
    healthy = record.get("healthy_after_s")
    return (f"{record['boot_id']:44} {(cache.get('state') or '-'):7} {(cache.get('log') or '-'):8} grew {grew:40} "
            f"healthy {healthy if healthy is None else round(healthy, 1)!s:>6} s  compile {_first(COMPILE_S, log):>6} s  "
            f"graphs {_first(GRAPHS_S, log):>3} s  KV {_first(KV_GIB, log):>6} GiB {_first(KV_TOKENS, log):>11} tok  "
            f"SM {sum(clocks) / len(clocks) if clocks else 0:6.0f} MHz  {sum(power) / len(power) if power else 0:5.0f} W  "
            f"rounds {' '.join(rounds)}")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    for boot_dir in sorted((root / "boots").iterdir(), key=lambda p: p.name):
        if (boot_dir / "boot.json").exists():
            print(boot_line(root, boot_dir))


if __name__ == "__main__":
    main()
