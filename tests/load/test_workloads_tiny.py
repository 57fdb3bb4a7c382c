"""Open-loop arrivals and `rig sweep` against tiny-cpu (a real transformers server)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import rig_cli
from scipy import stats

from rig.load.records import read_records
from rig.load.scenarios import load_scenario
from rig.load.workload import gamma_schedule
from rig.loadrun.runner import run_scenario

pytestmark = pytest.mark.e2e


def test_open_loop_on_tiny_cpu_meets_its_rate_with_poisson_gaps(tiny, tmp_path):
    """8 requests/s for 60 s (480 arrivals) against the real server: the achieved rate is within 5% of
    the target over the window, and the sent gaps (divided by the schedule's normalisation) pass a
    Kolmogorov-Smirnov test against the exponential. A client the machine starved is INVALID, and
    says why, instead."""
    target, _ = tiny
    scenario = load_scenario("open-loop").scaled(True).with_changes(
        arrivals={"rate": 8.0, "burstiness": 1.0, "drain_s": 30.0}, duration_s=60.0, max_tokens=6,
        output_lengths={"distribution": "uniform", "min": 2, "max": 6})
    summary = run_scenario(target, scenario, tmp_path / "run", progress=False)
    arrivals = summary.metrics.arrivals
    assert summary.metrics.window.steady and arrivals.scheduled >= 440, arrivals
    if not summary.client.valid:
        assert summary.client.reasons and any("client INVALID" in p for p in summary.problems()), summary.client
        return
    assert abs(arrivals.achieved_vs_target - 1) <= 0.05, arrivals
    assert arrivals.unsent == 0 and arrivals.queued == 0, arrivals
    assert arrivals.gaps.ks_p > 0.01, arrivals.gaps
    # The same test by hand, from the raw records, against the exponential with the target rate.
    window = summary.metrics.window
    sends = sorted(r.t_send for r in read_records(tmp_path / "run") if window.start <= r.t_scheduled <= window.end)
    factor = gamma_schedule(8.0, 1.0, 480, scenario.seed)[1]
    assert stats.kstest(np.diff(sends) / factor, "expon", args=(0, 1 / 8.0)).pvalue > 0.01
    assert not summary.problems() and summary.metrics.requests.error_rate == 0


def test_sweep_on_tiny_cpu_writes_the_table_the_png_and_a_knee(tiny, tmp_path):
    target, root = tiny
    from rig import paths

    env = {"RIG_RESULTS_DIR": str(paths.results_dir()), "RIG_STATE_DIR": str(paths.state_dir())}  # the module's running boot
    result = rig_cli("sweep", "tiny-cpu", "--scenario", "open-loop", "--small", "--rates", "4,16,96", "--duration", "6",
                     "--goodput", "ttft<=40ms,tpot<=20ms", "--slo-share", "0.9", env=env, timeout=900)
    assert result.returncode in (0, 4), result.stdout[-3000:] + result.stderr[-2000:]
    out = sorted(paths.results_dir().glob("tiny-cpu/*/sweep-open-loop"))[-1]
    data = json.loads((out / "sweep.json").read_text())
    assert [p["load"] for p in data["points"]] == [4.0, 16.0, 96.0] and data["complete"]
    assert (out / "sweep.png").stat().st_size > 20_000 and "| request rate (req/s) |" in (out / "sweep.md").read_text()
    knee = data["knee"]
    assert knee["status"] and (knee["load"] is None or knee["load"] in (4.0, 16.0, 96.0)), knee
    for point in data["points"]:
        assert point["output_tok_s"] > 0 and point["slo_share"] is not None
        if point["problems"]:  # an unusable point ends the knee's walk and is named
            assert "not usable" in knee["status"] or knee["load"] is not None and knee["load"] < point["load"], knee
    # The warmup ran once, at the highest load, and was kept apart.
    assert (out / "warmup-rate-96" / "summary.json").exists() and len(list(out.glob("warmup-*"))) == 1
    assert f"Knee: {knee['status']}" in result.stdout
