"""A comparison on a host that vanishes between two steps, end to end on tiny-cpu: the first step
is cut after its first boot and packs what it has; the next step, on a fresh host, stops before
anything runs (exit 42) until the bundle is installed again, then unpacks the pack and resumes
the comparison to its verdict, keeping the boot the first host measured. Each step also packs a
GPU recipe's compile caches (a file standing in for vLLM's), and the fresh host's first step merges
them into its own caches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, free_port
from synthetic_bundles import make_bundle, make_wheel

from rig.hosts import hostside

pytestmark = pytest.mark.e2e
STEP = REPO / "benchmarks" / "gpu-host" / "step.sh"
# One pair: the first host finishes one boot and is cut in the next; the fresh host boots the rest.
ARGS = ["tiny-cpu", "--arm", "off:RIG_TOKEN_DELAY_MS=0", "--arm", "on:RIG_TOKEN_DELAY_MS=3", "--boots", "1", "--rounds", "1",
        "--duration", "2"]


def _env(tmp: Path, results: Path, **extra: str) -> dict[str, str]:
    """A host's folders under `tmp`, its compile caches too; the results at the same path on every
    host, as the docs ask (boot entries name their files by it)."""
    caches = {name: str(tmp / name.lower()) for name in ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    return os.environ | caches | {"RIG_SITE": str(tmp / "site"), "RIG_STAGE": str(tmp / "stage"),
                                  "RIG_RESULTS_DIR": str(results), "RIG_STATE_DIR": str(tmp / "state"),
                                  "RIG_PYTHON": sys.executable} | extra


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _boots(results: Path) -> dict[str, str]:
    """boot entry file -> its boot id, for every finished boot of the comparison."""
    return {p.name: json.loads(p.read_text())["boot_id"] for p in results.glob("compare/*/boots/*.json")
            if "in-progress" not in p.name and not p.name.endswith(".partial")}


def test_a_comparison_cut_on_one_host_resumes_from_its_pack_on_a_fresh_one(tmp_path):
    parts = make_bundle(tmp_path / "bundle", [make_wheel(tmp_path / "wheels", "stand-in", "1.0", {"stand_in.py": b""})],
                        1 << 20)
    part_dirs = [str(p) for p in sorted((tmp_path / "bundle" / "out").iterdir())]
    assert parts["parts"]
    host_a, results = tmp_path / "a", tmp_path / "results"
    # a port of its own, taken now: the recipe's default may be another test's
    port = free_port()
    args = [*ARGS, "--port", str(port)]
    assert subprocess.run(["bash", str(STEP), "install", *part_dirs], env=_env(host_a, results), cwd=REPO).returncode == 0
    compiled = Path("torch_compile_cache/816012a40c/rank_0_0/backbone/computation_graph.py")
    (host_a / "vllm_cache_root" / compiled).parent.mkdir(parents=True)
    (host_a / "vllm_cache_root" / compiled).write_text("compiled on host a")

    # Step 1, cut as a reclaimed host would cut it: after its first finished boot.
    first = subprocess.Popen(["bash", str(STEP), "compare", "900", "--", *args], cwd=REPO, start_new_session=True,
                             env=_env(host_a, results, RIG_PACK_OUT=str(tmp_path / "pack-a"), RIG_PACK_CACHES="llama8b-h200"),
                             stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not _boots(results) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(1)
    os.killpg(first.pid, signal.SIGINT)
    assert first.wait(timeout=300) == 130  # rig's Ctrl-C: the finished boots kept, then packed
    kept = _boots(results)
    assert kept and (tmp_path / "pack-a" / "pack" / "part-01" / "pack.json").exists()
    assert (tmp_path / "pack-a" / "caches" / "part-01" / "pack.json").exists()
    # Ctrl-C stopped the engine the cut boot had started, though the step's `timeout --foreground`
    # relayed the SIGINT to rig a second time: nothing listens on the port.
    assert not _listening(port)
    # The host is gone, and its results and processes with it: only the pack remains.
    shutil.rmtree(results)

    # Step 2 on a fresh host: nothing installed, no results.
    host_b = tmp_path / "b"
    env_b = _env(host_b, results, RIG_PACK_IN=str(tmp_path / "pack-a" / "pack"), RIG_PACK_OUT=str(tmp_path / "pack-b"),
                 RIG_CACHES_IN=str(tmp_path / "pack-a" / "caches"))
    fresh = subprocess.run(["bash", str(STEP), "compare", "900", "--", *args], env=env_b, cwd=REPO, capture_output=True, text=True)
    assert fresh.returncode == hostside.EXIT_NOT_INSTALLED and "fresh host" in fresh.stdout
    assert not results.exists()
    assert subprocess.run(["bash", str(STEP), "install", *part_dirs], env=env_b, cwd=REPO).returncode == 0
    done = subprocess.run(["bash", str(STEP), "compare", "900", "--", *args], env=env_b, cwd=REPO, capture_output=True, text=True)
    # a busy box can leave every pair's rounds unusable for the client: then the step names it (exit 4)
    assert done.returncode == 0 or (done.returncode == 4 and "no data" in done.stdout), done.stdout[-2000:] + done.stderr[-2000:]
    resumed = _boots(results)
    assert len(resumed) == 2 and all(resumed[name] == boot for name, boot in kept.items())
    assert list(results.glob("compare/*/compare.json"))
    assert (tmp_path / "pack-b" / "pack" / "part-01" / "pack.json").exists()
    assert (host_b / "vllm_cache_root" / compiled).read_text() == "compiled on host a"
    # The next step on the same host packs to the same place: its pack replaces the last one.
    last = json.loads((tmp_path / "pack-b" / "pack" / "part-01" / "pack.json").read_text())["id"]
    again = subprocess.run(["bash", str(STEP), "run", "60", "--", "validate", "tiny-cpu"], env=env_b, cwd=REPO,
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert json.loads((tmp_path / "pack-b" / "pack" / "part-01" / "pack.json").read_text())["id"] != last
    assert sorted(p.name for p in (tmp_path / "pack-b").iterdir()) == ["pack"]
