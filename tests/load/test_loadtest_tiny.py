"""Every scenario end to end against tiny-cpu (a real transformers server) at small sizes."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rig.load.prompts import TokenCounter, build_prompts
from rig.load.scenarios import load_scenario, scenario_names
from rig.loadrun.locust_run import LocustRun
from rig.loadrun.runner import run_scenario, workload_config
from rig.loadrun.session import run_scenarios

pytestmark = pytest.mark.e2e


def test_prompts_are_exact_in_tokens(tiny):
    target, _ = tiny
    counter = TokenCounter(target.model_dir)
    for name in ("decode-ctx3k", "prefill-8k"):
        scenario = load_scenario(name).scaled(True)
        prompts, nonce = build_prompts(scenario, counter)
        assert nonce is not None and nonce.tokens >= 2
        import random

        rng = random.Random(1)
        for prompt in prompts:
            for _ in range(3):
                assert len(counter.encode(nonce.sample(rng) + prompt.text)) == scenario.prompt_tokens
        assert len({p.text for p in prompts}) == len(prompts)


def test_every_scenario_loads_and_builds_its_workload_for_the_served_tokenizer(tiny):
    """Every shipped scenario, full and small: the strict loader takes it, and its prompts (exact in
    tokens) and its kind's workload (arrival schedule, trace, conversations) build for the served
    tokenizer. Running each through Locust would only re-prove the wiring the runs below prove."""
    target, _ = tiny
    counter = TokenCounter(target.model_dir)
    names = scenario_names()
    assert {"prose-c1", "code-c1", "decode-ctx0", "decode-ctx3k", "prefill-8k", "prefill-64k", "c3000"} <= set(names)
    for name in names:
        full = load_scenario(name)
        assert full.scaled(False) == full and full.duration_s >= full.scaled(True).duration_s, name
        scenario = full.scaled(True)  # the sizes the runs here use; full sizes take the same code path
        prompts, nonce = build_prompts(scenario, counter)
        assert prompts and (nonce is not None) == scenario.unique_prompts, name
        workload = workload_config(scenario, counter, f"{name}/test")
        assert bool(workload.offsets) == (scenario.kind in ("open_loop", "trace")), name
        if scenario.kind == "multi_turn":  # a conversation file's turns, or generated ones (built by the Locust user)
            assert workload.turns == scenario.conversation.turns, name
            assert (workload.conversations is not None) == (scenario.conversation.file is not None), name


def test_closed_loop_scenarios_run_with_their_own_warmup(tiny):
    """A decode and a prefill scenario on the real server: each one's first run after the boot is its
    warmup (kept and marked), the measured run follows, runs.jsonl keeps the warmup rule's state, and
    a second call on the same boot runs no warmup."""
    target, root = tiny
    names = ["prose-c1", "prefill-8k"]
    summaries = run_scenarios(target, names, small=True, workers=1, root=root / "run", progress=False)
    assert [(s.name, s.warmup) for s in summaries] == [(n, w) for n in names for w in (True, False)]
    for summary in summaries:
        metrics = summary.metrics
        assert metrics.requests.total >= 1, (summary.name, metrics.requests)
        errors = {k: n for k, n in metrics.requests.errors.items() if k != "cut_by_window"}
        assert not errors, (summary.name, errors)
        assert metrics.output_tok_s > 0 and summary.provenance.boot_id == target.boot_id
    by_name = {s.name: s for s in summaries if not s.warmup}
    prefill = by_name["prefill-8k"].metrics
    assert prefill.tokens.prompt_tokens_usage == prefill.tokens.prompt_tokens_target == 512
    assert prefill.prefill_tok_s.token_weighted > 0 and prefill.requests.unique_prompts
    decode = by_name["prose-c1"].metrics
    assert decode.user_decode_tok_s.token_weighted > 0 and decode.tpot_s.p50 > 0
    if not decode.window.steady:  # a busy machine can legitimately keep a short run from steady state
        assert by_name["prose-c1"].problems(), decode.window
    runs = [json.loads(line) for line in Path(target.record.boot_dir, "runs.jsonl").read_text().splitlines()]
    assert [r["warmup"] for r in runs][:2] == [True, False] and all(r["complete"] for r in runs)
    again = run_scenarios(target, ["prose-c1"], small=True, workers=1, root=root / "again", progress=False)
    assert len(again) == 1 and not again[0].warmup


def test_the_default_series_passes_where_it_can_and_names_what_this_machine_cannot_measure(tiny, capsys):
    """`rig loadtest tiny-cpu` with no --scenario: prose-c1, code-c1 and a scaled-down c3000. A run
    whose only problem is the client (on a busy 2-core box, c3000's 8 users can move the client's
    timing past its limit) is named as skipped with its bound and fails nothing; any other problem,
    or nothing measured at all, still exits 4. The answer is the first and the last line."""
    from rig.cli_args import LoadOptions
    from rig.exits import Exit
    from rig.load.summary import RunSummary
    from rig.loadrun.command import client_only, loadtest

    code = loadtest("tiny-cpu", None, LoadOptions(small=True), duration_s=3.0)
    out = capsys.readouterr().out
    answers = [line for line in out.splitlines() if line.startswith("loadtest: ")]
    assert len(answers) == 2 and answers[0] == answers[1] and out.rstrip().endswith(answers[0]), out[-3000:]
    root = Path(next(line for line in out.splitlines() if line.startswith("results: ")).split()[1])
    runs = {name: RunSummary.read(root / name) for name in ("prose-c1", "code-c1", "c3000")}
    skipped = {name for name, run in runs.items() if client_only(run)}
    failed = {name for name, run in runs.items() if run.problems() and name not in skipped}
    assert code == (Exit.UNUSABLE if failed or len(skipped) == len(runs) else Exit.OK), (code, answers[0])
    assert all(f"skipped: {name}: this machine cannot measure it" in answers[0] for name in skipped), answers[0]
    assert (root / "summary.md").read_text().splitlines()[0] == answers[0]


def test_one_connection_per_user_across_sequential_requests(tiny, tmp_path):
    """Counted by the real server: uvicorn logs each request with the client's port. Two users,
    several requests each, must arrive over exactly two connections (streams read to the end)."""
    import re

    target, _ = tiny
    log = Path(target.record.log_path)
    before = log.stat().st_size
    scenario = load_scenario("prose-c1").scaled(True).with_changes(users=2, spawn_rate=2.0, duration_s=3.0)
    summary = run_scenario(target, scenario, tmp_path / "run", progress=False)
    with open(log, "rb") as handle:
        handle.seek(before)
        text = handle.read().decode(errors="replace")
    ports = re.findall(r'127\.0\.0\.1:(\d+) - "POST /v1/chat/completions', text)
    assert len(ports) >= 4 and summary.metrics.requests.total >= 4, text[-2000:]
    assert len(set(ports)) == 2, sorted(set(ports))


def test_interrupt_writes_the_summary_of_what_was_measured(tiny, monkeypatch, tmp_path):
    target, _ = tiny

    original_wait = LocustRun.wait

    def interrupted(self, progress=True, ended=None):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not list(self.out_dir.glob("records-*.jsonl")):
            time.sleep(0.1)
        time.sleep(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(LocustRun, "wait", interrupted)
    scenario = load_scenario("prose-c1").scaled(True)
    summary = run_scenario(target, scenario, tmp_path / "run", progress=False)
    monkeypatch.setattr(LocustRun, "wait", original_wait)
    assert summary.interrupted and summary.metrics.requests.total >= 1 and "interrupted" in summary.problems()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["interrupted"]


def _as_a_foreground_job(then: Callable[[], object] | None) -> None:
    """SIGINT at its default, as in a terminal's foreground job: a shell starts a background job (this
    suite, say, under `make test &`) with SIGINT ignored, an exec keeps it ignored, and Python then
    never turns it into KeyboardInterrupt, so a Ctrl-C sent to rig would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if then is not None:
        then()


def _streaming_loadtest(target, tmp_path: Path, duration: str, **popen) -> tuple[subprocess.Popen, Path]:
    """`rig loadtest --url` in a process of its own, once Locust streams (its first records written)."""
    from conftest import REPO

    results = tmp_path / "results"
    popen["preexec_fn"] = functools.partial(_as_a_foreground_job, popen.get("preexec_fn"))
    env = {**os.environ, "RIG_RESULTS_DIR": str(results), "RIG_STATE_DIR": str(tmp_path / "state"),
           "RIG_MODEL_DIR": target.model_dir or ""}
    load = subprocess.Popen([sys.executable, "-m", "rig", "loadtest", "--url", target.record.base_url, "--scenario", "prose-c1",
                             "--small", "--duration", duration, "--workers", "1"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)
    deadline = time.monotonic() + 120
    while not any(path.stat().st_size for path in results.glob("**/records-*.jsonl")):
        assert load.poll() is None and time.monotonic() < deadline, load.communicate()
        time.sleep(0.2)
    return load, results


def test_sigterm_during_a_load_run_writes_it_up_and_exits_128_plus_the_signal(tiny, tmp_path):
    """A scheduler's preemption (SIGTERM) while Locust runs: the run is written up like a Ctrl-C, and
    the exit status still names the signal, as rig's help promises (128+N), though the load run
    catches the interrupt to write it up (a caught one must not turn into 130, "interrupted")."""
    load, results = _streaming_loadtest(tiny[0], tmp_path, "60", preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    load.send_signal(signal.SIGTERM)
    stdout, stderr = load.communicate(timeout=120)
    assert load.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "rig: stopped by SIGTERM" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert list(results.glob("**/summary.json")), stdout[-2000:]


def _block_stop_signals() -> None:
    """What a CI wrapper did to a fresh machine's tests: SIGTERM and SIGHUP blocked, a mask every
    process it starts inherits (rig's Locust processes stopped only at their planned end)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})


@pytest.mark.parametrize("preexec", [None, _block_stop_signals], ids=["", "stop signals blocked"])
def test_a_ctrl_c_at_the_terminal_stops_the_run_and_keeps_its_client_statistics(tiny, tmp_path, preexec):
    """A terminal's Ctrl-C reaches the whole foreground process group. Locust's processes run in
    sessions of their own and rig stops them with Locust's own shutdown (SIGTERM): the run ends
    there, not at its planned end (a SIGINT raised in a greenlet was at times printed and ignored,
    and the run went on), and its client statistics are written whole (a second SIGINT cut the
    write: a 0-byte .json.tmp, and 'no client statistics were written'); also when rig was started
    with SIGTERM blocked."""
    load, results = _streaming_loadtest(tiny[0], tmp_path, "120", start_new_session=True,  # a terminal's foreground group
                                        preexec_fn=preexec)
    time.sleep(1)
    os.killpg(load.pid, signal.SIGINT)  # what the terminal sends
    stdout, stderr = load.communicate(timeout=120)
    assert load.returncode == 128 + signal.SIGINT, stderr[-2000:]
    [summary_path] = list(results.glob("**/summary.json"))
    summary = json.loads(summary_path.read_text())
    assert summary["interrupted"] and summary["metrics"]["window"]["end"] - summary["metrics"]["window"]["start"] < 60, summary["metrics"]["window"]
    assert list(summary_path.parent.glob("client-*.json")) and not list(results.glob("**/*.tmp")), sorted(results.rglob("*"))
    assert "no client statistics" not in summary_path.with_name("summary.md").read_text()


def test_attach_mode_measures_a_server_rig_did_not_start(tiny, tmp_path):
    """`rig loadtest --url`: the boot identity comes from the process listening on the port, so the
    first run against it is the warmup and a second invocation measures at once."""
    from conftest import measured, rig_cli

    target, _ = tiny
    env = {"RIG_RESULTS_DIR": str(tmp_path / "results"), "RIG_STATE_DIR": str(tmp_path / "state"),
           "RIG_MODEL_DIR": target.model_dir or ""}
    args = ["loadtest", "--url", target.record.base_url, "--scenario", "prose-c1", "--small", "--duration", "2", "--workers", "1"]
    first = rig_cli(*args, env=env)
    assert measured(first), first.stdout[-2000:] + first.stderr[-2000:]
    assert "attached to" in first.stdout and "(process-" in first.stdout, first.stdout[-500:]
    boots = list((tmp_path / "results" / "boots").glob("attached-*"))
    assert len(boots) == 1
    runs = [json.loads(line) for line in (boots[0] / "runs.jsonl").read_text().splitlines()]
    assert [r["warmup"] for r in runs] == [True, False]
    second = rig_cli(*args, env=env)
    assert measured(second), second.stdout[-2000:] + second.stderr[-2000:]
    runs = [json.loads(line) for line in (boots[0] / "runs.jsonl").read_text().splitlines()]
    assert [r["warmup"] for r in runs] == [True, False, False]
    summaries = sorted((tmp_path / "results" / "attached").glob("*/prose-c1/summary.json"))
    assert len(summaries) == 2 and json.loads(summaries[-1].read_text())["provenance"]["driver"] == "attached"


def test_loadtest_of_another_variant_than_the_one_up_is_refused(tiny):
    """tiny-cpu:cb is up: `rig loadtest tiny-cpu:serial` measured it and exited 0 (a note said so),
    a run of the wrong server under the asked-for name. Named bare, the recipe measures its boot."""
    from rig.errors import RigError
    from rig.loadrun.session import acquire_target

    target, _ = tiny
    other = "tiny-cpu:serial" if target.record.ref != "tiny-cpu:serial" else "tiny-cpu:cb"
    with pytest.raises(RigError) as refused:
        acquire_target(other)
    assert refused.value.field == "recipe" and target.record.ref in refused.value.fix
    measured_target, driver = acquire_target("tiny-cpu")
    assert driver is None and measured_target.record.boot_id == target.record.boot_id
    assert measured_target.resolved.ref == target.record.ref


@pytest.mark.parametrize("preexec", [None, _block_stop_signals], ids=["", "stop signals blocked"])
def test_locusts_processes_stop_when_rig_is_killed(tiny, tmp_path, preexec):
    """Locust's processes run in sessions of their own (rig stops them), so a kill of rig alone
    (`timeout -k`, the OOM killer) reaches them through the kernel's parent-death signal: they stop
    instead of loading the server, and the host, until their planned end; also when rig was started
    with SIGTERM blocked."""
    import psutil

    load, _ = _streaming_loadtest(tiny[0], tmp_path, "300", preexec_fn=preexec)
    children = psutil.Process(load.pid).children()
    assert children, "Locust runs in processes of its own"
    load.kill()
    load.communicate(timeout=60)
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, [p.cmdline()[:4] for p in alive]


def test_a_second_ctrl_c_waits_for_the_run_to_be_written_up(tiny, tmp_path):
    """Impatient users press Ctrl-C again: the second (and third) came while Locust stopped or the
    summary was computed and lost the whole summary (the records kept, nothing said so)."""
    load, results = _streaming_loadtest(tiny[0], tmp_path, "120", start_new_session=True)
    time.sleep(1)
    for pause in (0.0, 0.05, 0.2, 0.3):
        time.sleep(pause)
        os.killpg(load.pid, signal.SIGINT)
    stdout, stderr = load.communicate(timeout=120)
    assert load.returncode == 128 + signal.SIGINT, stderr[-2000:]
    [summary_path] = list(results.glob("**/summary.json"))
    assert json.loads(summary_path.read_text())["interrupted"] and "Traceback" not in stderr, stderr[-2000:]
