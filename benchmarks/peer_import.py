"""What `rig import` costs per megabyte of a peer's file: wall time and peak memory.

The import's size cap (rig.load.peers.MAX_PEER_EXPORT_BYTES) bounds the work only if the cost per
megabyte is bounded too: a reader that holds the whole text, its parsed tree and every record at once
takes tens of times the file's size. This writes a vLLM result JSON (`--save-result
--save-detailed`) and an AIPerf profile_export.jsonl of about `--mb` megabytes each (requests of
`--tokens` output tokens, as the peers write them), imports each in a fresh process, and prints its
seconds and its peak resident memory above the same process's before the import, both per megabyte.

    python3 benchmarks/peer_import.py [--mb 8 32] [--tokens 256]

Not a test: a number to read against the cap (a 1 GiB file at the printed rate must fit a host).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The import's own garbage is collected before the baseline: otherwise when the cyclic collector
# next runs (which any change to what rig imports shifts) moves the peak by about 20 MB at 32 MB.
MEASURE = """
import gc, resource, sys, time
from pathlib import Path
from rig.load.peers import import_file
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
import_file(Path(sys.argv[1]), "prose-c1", Path(sys.argv[2]), progress=False)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(seconds, (peak - before) * 1024)
"""


def _vllm_row_bytes(tokens: int) -> int:
    return len(json.dumps([0.0123456789] * tokens)) + 60


def write_vllm(path: Path, megabytes: float, tokens: int) -> int:
    requests = max(1, int(megabytes * 1e6 / _vllm_row_bytes(tokens)))
    gaps = [0.0123456789] * (tokens - 1)
    with path.open("w") as out:  # written piecewise: the writer must not be what the host runs out of
        out.write(f'{{"completed": {requests}, "duration": {requests * 0.01}, "input_lens": {json.dumps([128] * requests)}, ')
        out.write(f'"output_lens": {json.dumps([tokens] * requests)}, "ttfts": {json.dumps([0.05] * requests)}, ')
        out.write('"start_times": ' + json.dumps([i * 0.01 for i in range(requests)]) + ', "errors": ' + json.dumps([""] * requests))
        out.write(', "itls": [' + ", ".join(json.dumps(gaps) for _ in range(requests)) + "]}")
    return requests


def write_aiperf(path: Path, megabytes: float, tokens: int) -> int:
    gaps = [12.3456789] * (tokens - 1)
    written = requests = 0
    with path.open("w") as out:
        while written < megabytes * 1e6:
            start = 1_700_000_000_000_000_000 + requests * 10_000_000
            row = {"metadata": {"x_request_id": f"r{requests}", "request_start_ns": start,
                                "request_end_ns": start + 50_000_000 + 12_345_679 * (tokens - 1), "benchmark_phase": "profiling"},
                   "metrics": {"time_to_first_token": {"value": 50.0, "unit": "ms"},
                               "inter_chunk_latency": {"value": gaps, "unit": "ms"},
                               "output_sequence_length": {"value": tokens, "unit": "tokens"},
                               "input_sequence_length": {"value": 128, "unit": "tokens"}}}
            line = json.dumps(row) + "\n"
            out.write(line)
            written += len(line)
            requests += 1
    return requests


def measure(path: Path, out: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RIG_RESULTS_DIR": str(out.parent)}
    result = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(out)], env=env, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise SystemExit(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}")
    seconds, peak = result.stdout.split()
    return float(seconds), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[8.0, 32.0], help="file sizes to import, in MB")
    parser.add_argument("--tokens", type=int, default=256, help="output tokens per request")
    args = parser.parse_args()
    print(f"{'format':8} {'MB':>7} {'requests':>9} {'seconds':>8} {'s/MB':>7} {'peak MB':>8} {'peak/size':>9}")
    with tempfile.TemporaryDirectory(prefix="peer-import-") as scratch:
        for megabytes in args.mb:
            for name, write in (("vllm", write_vllm), ("aiperf", write_aiperf)):
                path = Path(scratch) / (f"{name}.json" if name == "vllm" else "profile_export.jsonl")
                requests = write(path, megabytes, args.tokens)
                size = path.stat().st_size / 1e6
                seconds, peak = measure(path, Path(scratch) / "results" / f"{name}-{megabytes:g}")
                print(f"{name:8} {size:7.1f} {requests:9d} {seconds:8.2f} {seconds / size:7.3f} {peak / 1e6:8.1f} "
                      f"{peak / 1e6 / size:9.1f}")
                path.unlink()


if __name__ == "__main__":
    main()
