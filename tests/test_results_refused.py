"""What rig wrote and reads back is input too: a result directory for `rig export`, a comparison for
`rig compare --resume`, each damaged or crafted, is refused in one line or redone, never a hang, a
traceback, a MemoryError or a silently wrong figure, and nothing is written outside the results."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import aiperf_row, rig_main, synthetic_run

from rig.compare.arms import parse_arm
from rig.compare.model import COMPARE_SCHEMA, BootEntry, ComparePlan, RunResult


def rig(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return rig_main(*args, env={"RIG_RESULTS_DIR": str(cwd / "results"), "RIG_STATE_DIR": str(cwd / "state")}, timeout=timeout)


def _records(run: Path) -> Path:
    return run / "records-p.jsonl"


def _first_line(run: Path, change) -> None:
    lines = _records(run).read_text().splitlines()
    lines[0] = change(lines[0])
    _records(run).write_text("\n".join(lines) + "\n")


def _summary(run: Path, change) -> None:
    data = json.loads((run / "summary.json").read_text())
    change(data)
    (run / "summary.json").write_text(json.dumps(data))


def _field(name, value):
    def change(line: str) -> str:
        data = json.loads(line)
        data[name] = value
        return json.dumps(data)
    return change


RUN_DAMAGE = {
    "summary is a FIFO": lambda run: ((run / "summary.json").unlink(), os.mkfifo(run / "summary.json")),
    "summary is /dev/zero": lambda run: ((run / "summary.json").unlink(), (run / "summary.json").symlink_to("/dev/zero")),
    "records file is a FIFO": lambda run: (_records(run).unlink(), os.mkfifo(_records(run))),
    "records file is /dev/zero": lambda run: (_records(run).unlink(), _records(run).symlink_to("/dev/zero")),
    "summary with NaN": lambda run: (run / "summary.json").write_text((run / "summary.json").read_text().replace(
        '"valid": true', '"valid": true, "lag_p99_ms": NaN', 1)),
    "timestamps backwards": lambda run: _first_line(run, _field("t_first", 1_600_000_000.0)),
    "timestamp 1e308": lambda run: _first_line(run, _field("t_last", 1e308)),
    "negative token count": lambda run: _first_line(run, _field("usage", {"completion_tokens": -8, "prompt_tokens": 4})),
    "duplicate key": lambda run: _first_line(run, lambda line: line[:-1] + ', "status": 500}'),
    "record cut mid-file": lambda run: _first_line(run, lambda line: line[: len(line) // 2]),
    "records repeated": lambda run: _records(run).write_text(_records(run).read_text() * 2),
    "records lost": lambda run: _records(run).write_text("".join(_records(run).read_text().splitlines(True)[:3])),
    "records file removed": lambda run: _records(run).unlink(),
    "window end 1e308": lambda run: _summary(run, lambda s: s["metrics"]["window"].update(end=1e308)),
    "window end in the year 9000": lambda run: _summary(run, lambda s: s["metrics"]["window"].update(end=2.2e11)),
    "window ends before it starts": lambda run: _summary(run, lambda s: s["metrics"]["window"].update(end=1.0)),
    "token count 10^300": lambda run: _first_line(run, _field("usage", {"completion_tokens": 10**300, "prompt_tokens": 4})),
    "token count 1e300 in the summary": lambda run: _summary(run, lambda s: s["metrics"]["requests"].update(total=10**300)),
    "request ends before it is sent": lambda run: _first_line(run, _field("t_end", 1.0)),
}


@pytest.mark.parametrize("case", sorted(RUN_DAMAGE))
def test_rig_export_refuses_a_damaged_run_in_one_line(tmp_path, case):
    run = tmp_path / "results" / "tiny-cpu" / "t" / "prose-c1"
    synthetic_run(run)
    RUN_DAMAGE[case](run)
    before = sorted(p.name for p in run.iterdir())
    result = rig("export", str(run), "--format", "vllm", cwd=tmp_path, timeout=120)  # a hang fails here
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written


def test_the_synthetic_run_itself_exports(tmp_path):
    run = tmp_path / "results" / "tiny-cpu" / "t" / "prose-c1"
    synthetic_run(run)
    result = rig("export", str(run), "--format", "vllm", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads((run / "vllm-result.json").read_text() if (run / "vllm-result.json").exists() else
                      next(run.glob("*.json")).read_text())
    assert data.get("completed", 0) >= 1


# ---- a comparison's plan, read back by --resume -----------------------------------------------------

def _plan(tmp_path: Path, **changes) -> Path:
    out = tmp_path / "results" / "compare" / "c"
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:RIG_TOKEN_DELAY_MS=0"), parse_arm("b:RIG_TOKEN_DELAY_MS=1")],
                       control=None, boots=1, rounds=1, scenarios=["prose-c1"], small=True)
    plan.write(out)
    data = json.loads((out / "plan.json").read_text())
    data.update(changes)
    (out / "plan.json").write_text(json.dumps(data))
    return out


PLAN_DAMAGE = {
    "another recipe": ({"recipe": "tiny-cpu-docker"}, "recipe"),
    "a traversal recipe": ({"recipe": "../../outside/evil"}, "recipe"),
    "a billion boots": ({"boots": 1_000_000_000}, "boots"),
    "a NaN target": ({"target_pct": float("nan")}, "target"),
    "an infinite duration": ({"duration_s": float("inf")}, "duration"),
    "a traversal scenario": ({"scenarios": ["../../etc/passwd"]}, "scenario"),
}


@pytest.mark.parametrize("case", sorted(PLAN_DAMAGE))
def test_a_resumed_plan_that_was_edited_is_refused_in_one_line(tmp_path, case):
    changes, word = PLAN_DAMAGE[case]
    out = _plan(tmp_path, **changes)
    result = rig("compare", "tiny-cpu", "--arm", "a:RIG_TOKEN_DELAY_MS=0", "--arm", "b:RIG_TOKEN_DELAY_MS=1", "--boots", "1",
                 "--rounds", "1", "--small", "--resume", str(out), cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert not (out / "boots").exists() and not (tmp_path / "outside").exists()


def test_an_entry_of_another_arm_or_with_a_nan_figure_is_kept_aside_and_redone(tmp_path, monkeypatch):
    from rig.compare import run as compare_run

    calls = []

    def fake_boot(job, setup):
        index, block, arm = job.index, job.block, job.arm
        calls.append(index)
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1,
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0}, problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=1, rounds=1,
                       scenarios=["prose-c1"], small=True)
    compare_run.run_compare(plan, tmp_path, progress=False)
    wrong_arm = json.loads((tmp_path / "boots" / "00-a.json").read_text())
    wrong_arm.update(arm="b", spec="b:X=1")
    (tmp_path / "boots" / "00-a.json").write_text(json.dumps(wrong_arm))
    nan = (tmp_path / "boots" / "01-b.json").read_text().replace("100.0", "NaN")
    (tmp_path / "boots" / "01-b.json").write_text(nan)
    calls.clear()
    _, entries = compare_run.run_compare(ComparePlan.read(tmp_path), tmp_path, progress=False)
    assert calls == [0, 1] and [e.arm for e in entries] == ["a", "b"]
    assert len([p for p in (tmp_path / "boots").iterdir() if ".unreadable-" in p.name]) == 2
    assert f'"schema": {COMPARE_SCHEMA}' in (tmp_path / "boots" / "00-a.json").read_text()


def _comparison_with_two_boots(out: Path, monkeypatch) -> tuple[ComparePlan, list[int]]:
    """A finished two-boot comparison in `out` whose rounds name run directories inside it; the
    boots it runs (again) are appended to the list returned."""
    from rig.compare import run as compare_run

    calls: list[int] = []

    def fake_boot(job, setup):
        index, block, arm, out_dir = job.index, job.block, job.arm, setup.out
        calls.append(index)
        run_dir = out_dir / "runs" / f"{index:02d}-{arm.name}" / "attempt-1" / "prose-c1"
        run_dir.mkdir(parents=True, exist_ok=True)
        return BootEntry(index=index, block=block, arm=arm.name, spec=arm.spec, control=False, attempt=1,
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir=str(run_dir), figures={"user_decode_tok_s": 100.0},
                                                        problems=[])}])

    monkeypatch.setattr(compare_run, "run_boot", fake_boot)
    plan = ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:X=0"), parse_arm("b:X=1")], control=None, boots=1, rounds=1,
                       scenarios=["prose-c1"], small=True)
    compare_run.run_compare(plan, out, progress=False)
    calls.clear()
    return plan, calls


def _point_round_at(entry: Path, directory: Path) -> None:
    data = json.loads(entry.read_text())
    data["rounds"][0]["prose-c1"]["dir"] = str(directory)
    entry.write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["a path outside", "a link inside that leads outside", "a path that climbs out"])
def test_a_resumed_entry_whose_round_lies_outside_the_comparison_is_kept_aside_and_redone(tmp_path, monkeypatch, how):
    from rig.compare import run as compare_run
    from rig.compare.trust import confined
    from rig.errors import Damaged

    out, elsewhere = tmp_path / "compare", tmp_path / "elsewhere" / "prose-c1"
    synthetic_run(elsewhere)  # records nobody measured for this comparison
    plan, calls = _comparison_with_two_boots(out, monkeypatch)
    entry = out / "boots" / "00-a.json"
    if how == "a path outside":
        _point_round_at(entry, elsewhere)
    elif how == "a link inside that leads outside":
        (out / "runs" / "link").symlink_to(elsewhere)
        _point_round_at(entry, out / "runs" / "link")
    else:
        _point_round_at(entry, out / "runs" / ".." / ".." / "elsewhere" / "prose-c1")
    with pytest.raises(Damaged) as refused:
        confined(BootEntry.read(entry), entry, out)
    assert refused.value.where == str(entry) and refused.value.field == "rounds.0.prose-c1.dir" and "\n" not in str(refused.value)
    _, entries = compare_run.run_compare(ComparePlan.read(out), out, progress=False)
    assert calls == [0] and all(str(out) in e.rounds[0]["prose-c1"].dir for e in entries)
    assert len([p for p in (out / "boots").iterdir() if ".unreadable-" in p.name]) == 1


def test_a_comparison_moved_whole_resumes_from_where_it_lies_now(tmp_path, monkeypatch):
    """A pack unpacked into another directory: each round recorded under the old location is read at
    the same place below the new one's runs/, and no finished boot is redone."""
    import shutil

    from rig.compare import run as compare_run

    old, new = tmp_path / "host-a" / "compare", tmp_path / "host-b" / "results" / "compare"
    _comparison_with_two_boots(old, monkeypatch)
    shutil.copytree(old, new)
    shutil.rmtree(old)
    calls = []
    monkeypatch.setattr(compare_run, "run_boot", lambda job, setup: calls.append(job.index))
    _, entries = compare_run.run_compare(ComparePlan.read(new), new, progress=False)
    assert calls == [] and len(entries) == 2
    assert all(e.rounds[0]["prose-c1"].dir.startswith(str(new / "runs")) for e in entries)
    assert not [p for p in (new / "boots").iterdir() if ".unreadable-" in p.name]


def test_an_imported_entry_of_an_arm_the_plan_does_not_have_is_left_out(tmp_path, monkeypatch, capsys):
    from rig.compare.entries import all_entries
    from rig.compare.model import IMPORTED_INDEX
    from rig.compare.trust import held_to_plan
    from rig.errors import Damaged

    out = tmp_path / "compare"
    plan, _ = _comparison_with_two_boots(out, monkeypatch)
    run_dir = out / "imported" / "x" / "prose-c1"
    run_dir.mkdir(parents=True)
    for arm, index in (("a", IMPORTED_INDEX), ("zz", IMPORTED_INDEX + 1)):
        BootEntry(index=index, block=1, arm=arm, spec="imported:vllm:r.json", control=False, attempt=1,
                  rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir=str(run_dir), figures={"user_decode_tok_s": 90.0},
                                                 problems=[])}]).write(out)
    stray = BootEntry.path(out, IMPORTED_INDEX + 1, "zz")
    with pytest.raises(Damaged) as refused:
        held_to_plan(BootEntry.read(stray), stray, plan)
    assert refused.value.where == str(stray) and refused.value.field == "arm"
    assert sorted((e.index, e.arm) for e in all_entries(out, plan)) == [(0, "a"), (1, "b"), (IMPORTED_INDEX, "a")]
    assert "zz" in capsys.readouterr().err


def test_rig_import_into_a_comparison_writes_its_run_inside_it_and_refuses_an_out_elsewhere(tmp_path, monkeypatch):
    from rig.compare.imported import import_into
    from rig.compare.trust import inside
    from rig.errors import Invalid

    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
    out = tmp_path / "compare"
    _comparison_with_two_boots(out, monkeypatch)
    peer = tmp_path / "vllm.json"
    peer.write_text(json.dumps(_vllm()))
    with pytest.raises(Invalid) as refused:
        import_into(out, peer, "a", None, None, tmp_path / "outside")
    assert refused.value.field == "--out" and not (tmp_path / "outside").exists()
    entry = import_into(out, peer, "a", None, None, None)
    assert all(inside(r.dir, out) for rounds in entry.rounds for r in rounds.values())


def test_a_boot_log_that_leads_outside_the_results_is_not_read(tmp_path, monkeypatch):
    from rig.compare.conditions import log_lines

    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
    (tmp_path / "results").mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("private line\n")
    (tmp_path / "results" / "server.log").symlink_to(secret)
    assert log_lines(str(tmp_path / "results" / "server.log")) == set()
    os.mkfifo(tmp_path / "results" / "fifo.log")
    assert log_lines(str(tmp_path / "results" / "fifo.log")) == set()  # no hang
    assert log_lines(str(secret)) == set()


# ---- a peer's result for `rig import` --------------------------------------------------------------

def _vllm(**changes) -> dict:
    base = {"completed": 2, "duration": 1.0, "input_lens": [4, 4], "output_lens": [3, 3], "ttfts": [0.05, 0.06],
            "itls": [[0.01, 0.01], [0.01, 0.01]], "errors": ["", ""], "start_times": [0.0, 0.5]}
    base.update(changes)
    return base


IMPORT_DAMAGE = {
    "a depth bomb": ("vllm.json", b'{"completed": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "not UTF-8 (vLLM)": ("vllm.json", json.dumps(_vllm()).encode().replace(b'"completed"', b'"compl\xffeted"')),
    "not UTF-8 (AIPerf)": ("profile_export.jsonl", b'{"metadata": {"x_request_id": "\xff"}}\n'),
    "an absurd TTFT": ("vllm.json", json.dumps(_vllm(ttfts=[1e308, 0.06])).encode()),
    "an absurd duration": ("vllm.json", json.dumps(_vllm(duration=1e300)).encode()),
    "counts that disagree": ("vllm.json", json.dumps(_vllm(completed=5)).encode()),
    "negative output lengths": ("vllm.json", json.dumps(_vllm(output_lens=[-3, 3])).encode()),
    "NaN": ("vllm.json", json.dumps(_vllm()).encode().replace(b"0.05", b"NaN")),
    "no requests at all": ("vllm.json", json.dumps(_vllm(completed=0, input_lens=[], output_lens=[], ttfts=[], itls=[], errors=[],
                                                          start_times=[])).encode()),
    "a million requests": ("vllm.json", json.dumps(_vllm(completed=1_000_001, input_lens=[1] * 1_000_001)).encode()),
    "a request that ends before it starts (AIPerf)": ("profile_export.jsonl", json.dumps(aiperf_row(request_end_ns=1_600_000_000_000_000_000)).encode()),
    "a token count of 1e300 (AIPerf)": ("profile_export.jsonl", json.dumps(aiperf_row(output_sequence_length=1e300)).encode()),
    "a token count of 10^300 (AIPerf)": ("profile_export.jsonl", json.dumps(aiperf_row(output_sequence_length=10**300)).encode()),
    "a fractional token count (AIPerf)": ("profile_export.jsonl", json.dumps(aiperf_row(output_sequence_length=3.5)).encode()),
    "a start in the year 10^11 (AIPerf)": ("profile_export.jsonl", json.dumps(aiperf_row(request_start_ns=10**30)).encode()),
}


@pytest.mark.parametrize("case", sorted(IMPORT_DAMAGE))
def test_rig_import_refuses_a_crafted_peer_file_in_one_line(tmp_path, case):
    name, data = IMPORT_DAMAGE[case]
    path = tmp_path / name
    path.write_bytes(data)
    result = rig("import", str(path), "--out", str(tmp_path / "results" / "run"), cwd=tmp_path, timeout=120)  # a hang fails here
    assert result.returncode == 2, (result.returncode, result.stdout[-300:], result.stderr[-300:])
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr[-1000:]
    assert not (tmp_path / "results" / "run").exists()


def test_a_run_note_cut_by_a_kill_does_not_swallow_the_next_one(tmp_path):
    """runs.jsonl is appended to once per run: after a note cut mid-write, the next note starts on a
    line of its own, so it is read back whole (the cut one is skipped) and the warmup is not repeated."""
    import numpy as np
    from simulated_runs import round_result, simulate_round

    from rig.boot.record import BootRecord
    from rig.load.scenarios import load_scenario
    from rig.loadrun.session import RUNS_FILE, boot_runs, note_run

    record = BootRecord(boot_id="b", ref="tiny-cpu", recipe="tiny-cpu", variant=None, driver="test", base_url="http://127.0.0.1:9",
                        boot_dir=str(tmp_path), log_path="", manifest_dir="", served_model="m")
    _, summary = round_result(simulate_round(np.random.default_rng(1), 0.02, 0.1, 4.0), 4.0, None)
    scenario = load_scenario("prose-c1")
    note_run(record, tmp_path / "run-1", summary, scenario)
    whole = (tmp_path / RUNS_FILE).read_bytes()
    (tmp_path / RUNS_FILE).write_bytes(whole + whole[:40])  # the second note was cut by a kill
    note_run(record, tmp_path / "run-3", summary, scenario)
    assert [Path(n.dir).name for n in boot_runs(record)] == ["run-1", "run-3"]


def test_a_warmup_counts_for_its_workload_not_for_its_name_at_another_size(tmp_path):
    """A scenario's warmup at --small does not warm up its --full size (other batch shapes: the
    full run was measured without one, on the small run's steady-state estimate), nor does an
    edited copy with the same name; another duration is the same workload."""
    import numpy as np
    from simulated_runs import round_result, simulate_round

    from rig.boot.record import BootRecord
    from rig.load.scenarios import load_scenario
    from rig.loadrun.session import note_run, settle_estimate, warmup_pending

    record = BootRecord(boot_id="b", ref="tiny-cpu", recipe="tiny-cpu", variant=None, driver="test", base_url="http://127.0.0.1:9",
                        boot_dir=str(tmp_path), log_path="", manifest_dir="", served_model="m")
    _, summary = round_result(simulate_round(np.random.default_rng(1), 0.02, 0.1, 4.0), 4.0, None)
    small, full = load_scenario("decode-c32").scaled(True), load_scenario("decode-c32").scaled(False)
    assert warmup_pending(record, small) and settle_estimate(record, small) == 0.0
    note_run(record, tmp_path / "warmup-decode-c32", summary.model_copy(update={"warmup": True}), small)
    assert not warmup_pending(record, small) and not warmup_pending(record, small.with_changes(duration_s=60.0))
    assert warmup_pending(record, full) and warmup_pending(record, small.with_changes(users=small.users + 1))
    assert settle_estimate(record, small) > 0  # the full size has no run of its own: the name's stands in
    assert settle_estimate(record, full) == settle_estimate(record, small)


def test_a_run_note_with_an_impossible_settle_time_is_refused_in_one_line(tmp_path):
    """runs.jsonl is read back to plan the next run: a settle time of 10^7 s planned a run of 10^7 s."""
    import pytest

    from rig.errors import RigError
    from rig.load.wire import RunNote, read_lines

    (tmp_path / "runs.jsonl").write_text('{"schema":1,"dir":"/x","scenario":"prose-c1","warmup":true,"complete":true,'
                                          '"settle_s":1e7,"time":1.0}\n')
    with pytest.raises(RigError):
        list(read_lines(tmp_path / "runs.jsonl", RunNote))


def test_an_interrupted_comparison_says_where_its_boots_are_and_how_to_resume(results_dir, monkeypatch, capsys):
    import pytest

    from rig.cli_args import LoadOptions
    from rig.compare import run as compare_run
    from rig.compare.command import CompareRequest, compare

    class Interrupting:  # Ctrl-C while the first boot starts
        def up(self, resolved, overlay, **kwargs):
            raise KeyboardInterrupt

    monkeypatch.setattr(compare_run, "driver_for", lambda resolved: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        compare(CompareRequest("tiny-cpu", ["a:RIG_TOKEN_DELAY_MS=0", "b:RIG_TOKEN_DELAY_MS=1"], boots=1, rounds=1,
                               load=LoadOptions(small=True), burn_in=False), progress=False)
    out = next((results_dir / "compare").iterdir())
    err = capsys.readouterr().err  # its one boot was interrupted while starting: nothing finished, the plan is kept
    assert f"compare: stopped before any boot finished; its plan is kept in {out}: run the same command with --resume {out}" in err, err


def test_an_unreadable_in_progress_marker_stops_nothing_and_says_so(results_dir, tmp_path):
    """Which boot a marker of another schema meant cannot be told: no server is stopped on a guess,
    and the note says what to check."""
    from rig.compare.arms import parse_arm
    from rig.compare.entries import stop_leftover

    arm = parse_arm("a:RIG_TOKEN_DELAY_MS=0")
    (tmp_path / "boots").mkdir()
    marker = tmp_path / "boots" / "00-a.in-progress.json"
    marker.write_text('{"schema": 99}')
    note = stop_leftover(tmp_path, 0, arm, "tiny-cpu")
    assert note and "was not stopped" in note and "rig down tiny-cpu" in note and not marker.exists()


def test_a_rounds_records_lost_moved_or_repeated_are_named_in_the_identity_under_batching(tmp_path):
    """The identity under batching reads each round's records again: a round whose records were
    emptied, whose directory moved with its comparison, or whose records no longer match its summary
    is named as left out (the line vanished without a word)."""
    from conftest import synthetic_run

    from rig.compare.identity import load_test_outputs
    from rig.compare.model import BootEntry, RunResult

    runs = {}
    for name in ("whole", "emptied", "moved", "repeated"):
        runs[name] = tmp_path / name / "prose-c1"
        synthetic_run(runs[name])
    (runs["emptied"] / "records-p.jsonl").write_text("")
    runs["moved"].rename(tmp_path / "moved" / "elsewhere")
    records = runs["repeated"] / "records-p.jsonl"
    lines = records.read_text().splitlines(True)
    records.write_text("".join(lines[:3]))
    entries = [BootEntry(index=i, block=1, arm="a", spec="a:X=1", control=False, attempt=1, boot_id="b",
                         rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir=str(run), figures={}, problems=[])}])
               for i, run in enumerate(runs.values(), start=1)]
    _, unreadable = load_test_outputs(entries, {"prose-c1": True})
    assert [line.split(" round")[0] for line in unreadable] == ["boot 02-a", "boot 03-a", "boot 04-a"], unreadable
