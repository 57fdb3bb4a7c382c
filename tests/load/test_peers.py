"""`rig export` read back by loaders written from vLLM's and AIPerf's documented fields (not from
rig's importer), `rig import` of both formats, and an imported AIPerf run joining a comparison."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port, rig_main
from test_loadtest_metrics import PROMPTS, FixedPrompts, scenario, start_timed_server

from rig.boot.record import BootRecord
from rig.compare.arms import parse_arm
from rig.compare.model import BootEntry, ComparePlan, RunResult
from rig.deploy.recipe import load
from rig.errors import RigError
from rig.load.peers import export_run, import_file
from rig.load.records import read_records
from rig.load.summary import RunSummary
from rig.loadrun.runner import LoadTarget, run_scenario


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One real closed-loop run (2 users, known timing) against the timed server."""
    root = tmp_path_factory.mktemp("peers")
    port = free_port()
    server = start_timed_server(port)
    record = BootRecord(boot_id="peers", ref="timed", recipe="tiny-cpu", variant=None, driver="test",
                        base_url=f"http://127.0.0.1:{port}", boot_dir=str(root / "boot"), log_path="", manifest_dir="",
                        served_model="timed")
    try:
        summary = run_scenario(LoadTarget(load("tiny-cpu"), record, None), scenario(users=2, spawn_rate=2, duration_s=6.0),
                               root / "run", counter=FixedPrompts(), prompts=PROMPTS, progress=False, settle_s=1.5)
    finally:
        server.kill()
        server.wait()
    return root / "run", summary


def _window_done(run: Path, summary: RunSummary):
    w = summary.metrics.window
    return [r for r in read_records(run) if r.complete and w.start <= r.t_send <= w.end]


# Loaders written from the peers' documentation: vLLM's result JSON (benchmarks/serve.py's
# result keys and --save-detailed lists) and AIPerf's profile_export.jsonl / _aiperf.json.

def load_vllm(path: Path) -> dict:
    data = json.loads(path.read_text())
    for key in ("date", "backend", "model_id", "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
                "errors", "generated_texts", "max_output_tokens_per_s", "max_concurrent_requests"):
        assert key in data, key
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99"):
            assert isinstance(data[f"{stat}_{metric}_ms"], float), (stat, metric)
    return data


def load_aiperf(directory: Path) -> tuple[list[dict], dict]:
    records = [json.loads(line) for line in (directory / "profile_export.jsonl").read_text().splitlines() if line]
    for record in records:
        assert {"metadata", "metrics", "error"} <= set(record)
        meta = record["metadata"]
        assert isinstance(meta["request_start_ns"], int) and meta["benchmark_phase"] == "profiling"
        for value in (record["metrics"] or {}).values():
            assert set(value) == {"value", "unit"}
    aggregate = json.loads((directory / "profile_export_aiperf.json").read_text())
    assert aggregate["schema_version"] and aggregate["request_latency"]["unit"] == "ms"
    return records, aggregate


def test_vllm_export_reads_back_with_vllms_definitions(measured, tmp_path):
    run, summary = measured
    (path,) = export_run(run, "vllm", tmp_path)
    data = load_vllm(path)
    done = _window_done(run, summary)
    assert data["completed"] == len(done) == len(data["ttfts"]) >= 4 and data["failed"] == 0
    # rig's own figures of the same records, by the peer's definitions: exact, whatever the box's load
    # (how close the client came to the server's known timing is tests/load/test_loadtest_metrics.py's)
    assert data["median_ttft_ms"] == pytest.approx(1000 * summary.metrics.ttft_s.p50)
    assert data["mean_itl_ms"] == pytest.approx(1000 * summary.metrics.itl_s.mean)
    # vLLM's TPOT: (latency - ttft) / (output_len - 1), per request
    tpots = [(sum(itl)) / (n - 1) for itl, n in zip(data["itls"], data["output_lens"])]
    assert data["mean_tpot_ms"] == pytest.approx(1000 * np.mean(tpots))
    assert data["output_throughput"] == pytest.approx(data["total_output_tokens"] / data["duration"])
    assert data["total_output_tokens"] == sum(data["output_lens"]) == 21 * len(done)
    assert data["median_e2el_ms"] == pytest.approx(1000 * summary.metrics.e2e_s.p50)
    assert data["rig_boot_id"] == "peers" and data["rig_usable"] == (not summary.problems())


def test_aiperf_export_reads_back_with_aiperfs_fields(measured, tmp_path):
    run, summary = measured
    export_run(run, "aiperf", tmp_path)
    records, aggregate = load_aiperf(tmp_path)
    good = [r for r in records if r["error"] is None]
    assert len(good) == len(_window_done(run, summary))
    ttfts = [r["metrics"]["time_to_first_token"]["value"] for r in good]
    assert all(r["metrics"]["time_to_first_token"]["unit"] == "ms" for r in good)
    assert np.median(ttfts) == pytest.approx(1000 * summary.metrics.ttft_s.p50)
    assert aggregate["time_to_first_token"]["p50"] == pytest.approx(np.median(ttfts))
    assert aggregate["request_latency"]["count"] == len(good)
    for r in good:  # latency = ttft + the chunk gaps (the stream's last output chunk)
        metrics = r["metrics"]
        assert metrics["request_latency"]["value"] == pytest.approx(
            metrics["time_to_first_token"]["value"] + sum(metrics["inter_chunk_latency"]["value"]))
        assert metrics["output_sequence_length"]["value"] == 21 and len(metrics["inter_chunk_latency"]["value"]) == 20


def test_the_peer_exports_are_views_of_the_figure_registry(measured, tmp_path):
    """Every figure a peer reports is written where Figure.peer_keys says, with rig's own value
    where the peer's series is rig's own samples; vLLM's TPOT by vLLM's definition, which is rig's
    here, since every chunk of the timed server carries one token."""
    from rig.load.figures import FIGURES, PEER_SERIES

    run, summary = measured
    vllm = load_vllm(export_run(run, "vllm", tmp_path / "vllm")[0])
    export_run(run, "aiperf", tmp_path / "aiperf")
    _, aggregate = load_aiperf(tmp_path / "aiperf")
    reported = [figure for figure in FIGURES.values() if figure.peer_keys()]
    assert {figure.samples for figure in reported} == set(PEER_SERIES)
    for figure in reported:
        ours = figure.read(summary.metrics)
        keys = figure.peer_keys()
        assert vllm[keys["vllm"]] == pytest.approx(ours, rel=1e-9), figure.name
        if "aiperf" in keys:
            metric, stat = keys["aiperf"].split(".")
            assert aggregate[metric][stat] == pytest.approx(ours, rel=1e-9), figure.name
    for series in PEER_SERIES.values():  # every series both peers write, under the peers' names
        assert all(f"{stat}_{series.vllm}_ms" in vllm for stat in ("mean", "median", "std", "p99"))
        assert series.aiperf is None or aggregate[series.aiperf]["unit"] == "ms"


@pytest.mark.parametrize("fmt", ["vllm", "aiperf"])
def test_import_of_an_export_gives_the_same_request_figures(measured, tmp_path, fmt):
    run, summary = measured
    paths = export_run(run, fmt, tmp_path / "export")
    import_file(paths[0], "prose-c1", tmp_path / "imported", progress=False)
    imported = RunSummary.read(tmp_path / "imported")
    assert imported.imported.tool == fmt and imported.imported.sha256
    for key in ("ttft_s", "itl_s", "e2e_s"):
        assert getattr(imported.metrics, key).p50 == pytest.approx(getattr(summary.metrics, key).p50, rel=1e-6), key
    assert imported.headline() == pytest.approx(summary.headline(), rel=1e-6)  # token-weighted decode tok/s
    assert imported.metrics.requests.completed == summary.metrics.requests.completed
    assert not imported.problems() and "not check" in imported.client.note  # says so, does not pass the check
    with pytest.raises(RigError):
        export_run(tmp_path / "imported", "vllm", tmp_path / "again")  # an imported run is not re-exported as rig's


def test_an_aiperf_export_larger_than_a_trace_file_imports(measured, tmp_path):
    """AIPerf's export grows with its requests: at 3000 streams for 33 s it is 91 MB, over the
    64 MiB a trace file may be (rig.load.inputs). Padded past that cap with a blank line (AIPerf's
    reader, and rig's, skip them), it imports with the same figures."""
    from rig.load.inputs import MAX_DATA_BYTES

    run, summary = measured
    export = export_run(run, "aiperf", tmp_path / "export")[0]
    with export.open("a") as handle:
        handle.write(" " * (MAX_DATA_BYTES + 1) + "\n")
    assert export.stat().st_size > MAX_DATA_BYTES
    imported = import_file(export, "prose-c1", tmp_path / "imported", progress=False)
    assert imported.summary.headline() == pytest.approx(summary.headline(), rel=1e-6)


def _comparison(root: Path) -> Path:
    """A comparison of prose-c1 planned as three ABBA blocks, of which the third block's `before`
    boot never ran (a failed boot, a lost machine): its `after` boot has no pair."""
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("before:RIG_TOKEN_DELAY_MS=0"), parse_arm("after:RIG_TOKEN_DELAY_MS=1")],
                       control=None, boots=3, rounds=1, scenarios=["prose-c1"], small=True)
    out = root / "compare"
    plan.write(out)
    figures = {"before": [49.0, 50.5], "after": [47.5, 48.0, 48.6]}
    for index, (block, arm) in enumerate(plan.order()):
        if (block, arm.name) == (2, "before"):
            continue
        entry = BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1, boot_id=f"b{index}",
                          rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir=str(out / f"r{index}"),
                                                         figures={"user_decode_tok_s": figures[arm.name].pop(0), "ttft_p50_ms": 100.0},
                                                         problems=[])}])
        entry.write(out)
    return out


def test_an_imported_aiperf_run_joins_a_comparison(measured, tmp_path):
    run, _ = measured
    out = _comparison(tmp_path)
    export_run(run, "aiperf", tmp_path / "peer")
    result = rig_main("import", str(tmp_path / "peer" / "profile_export.jsonl"), "--compare", str(out), "--arm", "before",
                     "--block", "2", env={"RIG_RESULTS_DIR": str(tmp_path / "results")})  # the run goes inside the comparison
    assert result.returncode == 0, result.stdout + result.stderr
    analysis = json.loads((out / "compare.json").read_text())
    comparison = analysis["scenarios"]["prose-c1"]["vs"]["after"]
    assert comparison["pairs"] == 3  # two rig pairs and the imported boot paired with block 2's rig boot
    assert analysis["boots"]["imported"][0]["spec"].startswith("imported:aiperf:")
    assert "Imported boot" in (out / "compare.md").read_text()
    assert sorted(p.name for p in (out / "boots").glob("*.json"))[-1] == "100-before.json"


IMPORT_CASES = {
    "aggregate only (no --save-detailed)": ({"completed": 3, "duration": 2.0, "median_ttft_ms": 5.0}, "input_lens"),
    "lists of different lengths": ({"completed": 1, "duration": 1.0, "input_lens": [1, 2], "output_lens": [1], "ttfts": [0.1],
                                    "itls": [[]], "errors": [""]}, "input_lens/"),
    "ttft as string": ({"completed": 1, "duration": 1.0, "input_lens": [1], "output_lens": [1], "ttfts": ["0.1"], "itls": [[]],
                        "errors": [""]}, "ttfts.0"),
    "negative duration": ({"completed": 1, "duration": -1, "input_lens": [], "output_lens": [], "ttfts": [], "itls": [],
                           "errors": []}, "duration"),
    "a gap that goes backwards": ({"completed": 1, "duration": 1.0, "input_lens": [1], "output_lens": [3], "ttfts": [0.1],
                                   "itls": [[0.01, -0.05]], "errors": [""]}, "itls.0.1"),
}


@pytest.mark.parametrize("case", sorted(IMPORT_CASES))
def test_a_bad_vllm_file_is_refused_in_one_line(case, tmp_path):
    document, field = IMPORT_CASES[case]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(document))
    with pytest.raises(RigError) as raised:
        import_file(path, None, tmp_path / "out", progress=False)
    assert "\n" not in str(raised.value) and raised.value.field.startswith(field), str(raised.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text,field", [
    ('{"metadata": {"x_request_id": "a", "request_start_ns": 1}, "metadata": {}}\n', "line 1"),
    ('{"metadata": {"x_request_id": "a", "request_start_ns": -5}, "metrics": null, "error": null}\n', "line 1: metadata"),
    ('{"metadata": {"x_request_id": "a", "request_start_ns": 1}, "metrics": {"time_to_first_token": {"value": NaN, "unit": "ms"}}}\n',
     "line 1"),
    ("not json at all\n", "(file)"),
    # rows rig's own reader would refuse in its copy: refused here, naming the peer's line
    ('{"metadata": {"x_request_id": "a", "request_start_ns": 1000000000000}, "metrics": {"time_to_first_token": '
     '{"value": -500, "unit": "ms"}}}\n', "line 1"),
    ('{"metadata": {"x_request_id": "a", "request_start_ns": 1000000000000}, "metrics": {"time_to_first_token": '
     '{"value": 5, "unit": "ms"}, "inter_chunk_latency": {"value": [10, -20, 10], "unit": "ms"}}}\n', "line 1"),
    ('{"metadata": {"x_request_id": "a", "request_start_ns": 999000000000000000000}, "metrics": null}\n', "line 1"),
])
def test_a_bad_aiperf_file_is_refused_in_one_line(text, field, tmp_path):
    path = tmp_path / "profile_export.jsonl"
    path.write_text(text)
    with pytest.raises(RigError) as raised:
        import_file(path, None, tmp_path / "out", progress=False)
    assert "\n" not in str(raised.value) and raised.value.field.startswith(field), str(raised.value)
    assert not (tmp_path / "out").exists()


def test_export_cli_writes_both_formats(measured, tmp_path):
    run, _ = measured
    for fmt, names in (("vllm", ["vllm-result.json"]), ("aiperf", ["profile_export.jsonl", "profile_export_aiperf.json"])):
        result = rig_main("export", str(run), "--format", fmt, "--out", str(tmp_path / fmt))
        assert result.returncode == 0, result.stderr
        assert sorted(p.name for p in (tmp_path / fmt).iterdir()) == sorted(names)


def test_an_aiperf_file_without_chunk_times_imports_and_says_why_it_has_no_decode_figure(tmp_path, capsys):
    """AIPerf rows with TTFT and latency but no inter_chunk_latency: the run is imported, and the
    line says which timing the decode headline lacks (not "no completed request", not None)."""
    rows = [{"metadata": {"x_request_id": f"r{i}", "request_start_ns": (1_000_000 + i) * 10**6},
             "metrics": {"time_to_first_token": {"value": 50, "unit": "ms"}, "request_latency": {"value": 545, "unit": "ms"},
                         "output_sequence_length": {"value": 100, "unit": "tokens"}}} for i in range(5)]
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    imported = import_file(path, None, tmp_path / "out")
    out = capsys.readouterr().out
    assert imported.summary.headline() is None
    assert "decode headline user_decode_tok_s none; problems: " in out and "None" not in out, out
    assert "none of the 5 completed request(s) in the window carries the timing it is computed from: two or more streamed" in out, out
