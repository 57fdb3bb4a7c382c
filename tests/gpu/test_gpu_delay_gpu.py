"""gpu_delay on a real GPU (marked gpu, skipped without CUDA): the spin lands on the step's stream,
ahead of the step's own kernels, and what the manifest reports is what the GPU spent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# The stand-in Worker's execute_model is what gpu_delay wraps; the step's own GPU work (a fixed chain
# of matrix products on the default stream) follows it, as vLLM's forward follows the wrapper's spin.
# The step is timed with events over many steps, against the same work without the call.
SCRIPT = """
import json, types, torch
import rig_adapters.runtime as runtime
runtime.arm_from_env()
from vllm.v1.worker.gpu_worker import Worker
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
worker, busy = Worker(), types.SimpleNamespace(total_num_scheduled_tokens=1)
def work():
    b = a
    for _ in range(8):
        b = b @ a
def timed(step, n=400):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(50):
        step()
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / n
for _ in range(1100):  # the adapter's own measurement (its first 1024 steps), then steady spins
    worker.execute_model(busy)
    work()
plain = timed(work)
delayed = timed(lambda: (worker.execute_model(busy), work()))
torch.cuda.synchronize()
worker.execute_model(busy)  # reads back the last spins
print(json.dumps({"plain_us": plain, "delayed_us": delayed}))
"""


def test_the_spin_lengthens_each_step_by_what_it_measured(tmp_path):
    manifests = tmp_path / "manifests"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'tests' / 'standins'}{os.pathsep}{REPO / 'adapter'}",
           "RIG_ADAPTER_MANIFEST_DIR": str(manifests), "RIG_ENGINE": "vllm", "RIG_GPU_DELAY_US": "50"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    timing = json.loads(result.stdout.strip().splitlines()[-1])
    entry = next(json.loads(p.read_text())["adapters"]["gpu_delay"] for p in manifests.glob("manifest-*.json"))
    stats = entry["stats"]
    assert entry["state"] == "armed" and entry["first_use"] is not None and entry["notes"]
    # The spin between its events: the asked-for 50 us of cycles plus its launch (6-9 us on an H200).
    assert 50 <= stats["spin_us"]["mean"] <= 62, stats
    reported = stats["added_us"]["mean"]  # what the adapter measured it adds to a step, in place
    independent = timing["delayed_us"] - timing["plain_us"]
    assert abs(reported - independent) <= 0.05 * independent + 2, (timing, stats)
