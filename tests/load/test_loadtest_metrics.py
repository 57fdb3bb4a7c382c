"""Load-test arithmetic against a streaming server whose token timing is known exactly:
TTFT, ITL, TPOT, per-user and window-clipped aggregate tok/s within 1% of the truth, the
steady-state window, several tokens per chunk, client stalls caught; a server that dies
mid-run leaves the records written so far and a summary that counts the errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, free_port

from rig.boot.record import BootRecord
from rig.deploy.recipe import load
from rig.load.prompts import FixedPrompts, TokenCounter
from rig.load.scenarios import Scenario
from rig.load.summary import SUMMARY_SCHEMA
from rig.load.wire import LAG_PROBE_KERNEL, Prompt, dispatch_wait
from rig.loadrun.runner import LoadTarget, run_scenario
from rig.loadrun.writeup import read_clients, read_dispatcher

pytestmark = pytest.mark.timed  # Locust against the timed server, held to its known timing

TTFT, ITL = 1.0, 0.02  # a long TTFT keeps the client's constant ~3 ms per request well under 1%


def start_timed_server(port: int, *extra: str) -> subprocess.Popen:
    from rig.testing import timed_server

    return timed_server.start(port, "--ttft", str(TTFT), "--itl", str(ITL), *extra)[0]


@pytest.fixture
def timed_target(tmp_path):
    port = free_port()
    server = start_timed_server(port)
    record = BootRecord(boot_id="timed-test", ref="tiny-cpu", recipe="tiny-cpu", variant=None, driver="test",
                        base_url=f"http://127.0.0.1:{port}", boot_dir=str(tmp_path / "boot"), log_path="", manifest_dir="",
                        served_model="timed")
    yield LoadTarget(load("tiny-cpu"), record, None), server
    server.kill()
    server.wait()


# Two whole blocks of the timed server's stand-in prefix cache (8 words each).
PROMPTS = [Prompt(name="p0", text="the harbour town woke slowly as the fishing boats came in with the tide and gulls", tokens=16)]


def redraw_timelines():
    """benchmarks/redraw_timelines.py, the script the raw-results archives point to, as a module."""
    spec = importlib.util.spec_from_file_location("redraw_timelines", REPO / "benchmarks" / "redraw_timelines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenario(**overrides) -> Scenario:
    base = dict(schema=1, name="timed", version=1, kind="decode", endpoint="chat", prompt_set="prose", prompt_tokens=8,
                max_tokens=21, temperature=0, seed=1, users=1, duration_s=4.0)
    base.update(overrides)
    return Scenario(**base)


def within(value: float, truth: float, tolerance: float = 0.01) -> bool:
    return abs(value - truth) <= tolerance * truth


def itl_p50_is_the_truth_or_named_unusable(summary) -> None:
    """ITL p50 against the timed server's ITL, where the client's own bound says the figure is
    usable; otherwise the run names why (a busy box moves a mean by one stalled read, so the
    median is the figure held to the truth)."""
    bound = summary.client.figures["itl_p50_ms"]
    if not bound.holds:
        assert bound.reason, summary.client
        return
    assert abs(summary.metrics.itl_s.p50 - ITL) <= (0.01 + bound.bound) * ITL, (summary.metrics.itl_s, bound)


def test_c1_metrics_match_the_known_timing(timed_target, tmp_path):
    target, _ = timed_target
    summary = run_scenario(target, scenario(duration_s=7.0), tmp_path / "run", counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False,
                           settle_s=2.5)
    assert summary.client.lag_probes == [LAG_PROBE_KERNEL]  # the lag is a socket-like event's (rig.load.kernel_timer)
    if not summary.client.valid:  # a busy box: the run must say so and why; its figures are not held to the truth
        assert summary.client.reasons and any("client INVALID" in p for p in summary.problems()), summary.client
        return
    metrics = summary.metrics
    assert metrics.requests.completed >= 3
    assert within(metrics.ttft_s.mean, TTFT), metrics.ttft_s
    assert within(metrics.itl_s.mean, ITL), metrics.itl_s
    assert within(metrics.tpot_s.mean, ITL), metrics.tpot_s
    assert within(metrics.user_decode_tok_s.token_weighted, 1 / ITL), metrics.user_decode_tok_s
    assert within(metrics.user_decode_tok_s.p50, 1 / ITL), metrics.user_decode_tok_s
    assert within(metrics.e2e_s.mean, TTFT + 20 * ITL), metrics.e2e_s
    assert metrics.tokens.usage_vs_chunks_mismatched_requests == 0
    # One fixed prompt, repeated: the server's stand-in prefix cache answers all but the first.
    assert metrics.tokens.cached_share == 1.0 and not metrics.requests.unique_prompts
    # The window opens after the first request (first token + one lifetime): steady state at c=1.
    assert metrics.window.steady and metrics.window.start > metrics.window.run_start + TTFT
    # The server's own /metrics, scraped during the run: one stream running, its token rate.
    server = summary.observations.server.metrics
    assert server["running_requests"].max == 1 and server["waiting_requests"].max == 0
    assert within(server["generation_tokens_per_s"].rate, 21 / (TTFT + 20 * ITL), 0.15), server
    picture = tmp_path / "run" / "timeline.png"
    assert summary.observations.timeline == "timeline.png" and picture.stat().st_size > 10_000
    # The committed raw-results archives leave the PNGs out: the run's own files draw it again, byte for byte.
    drawn, _ = picture.read_bytes(), picture.unlink()
    assert redraw_timelines().redraw(tmp_path / "run", force=False) == "drew timeline.png" and picture.read_bytes() == drawn
    assert summary.provenance.boot_id == "timed-test" and summary.schema_version == SUMMARY_SCHEMA and not summary.problems()
    for name in ("summary.json", "summary.csv", "summary.md", "config.json"):
        assert (tmp_path / "run" / name).exists()


def test_every_prompt_is_unique_and_exact_in_tokens(timed_target, tmp_path):
    """Prompts built for the served tokenizer get a per-request nonce: no prefix cache can answer
    them, and each stays exactly the scenario's token count."""
    from rig import paths
    from rig.tinymodel import ensure_tiny_model

    target, _ = timed_target
    counter = TokenCounter(str(ensure_tiny_model(paths.cache_dir() / "models")))
    summary = run_scenario(target, scenario(users=2, spawn_rate=2, duration_s=4.0, max_tokens=11, prompt_tokens=64),
                           tmp_path / "run", counter=counter, progress=False)
    from rig.load.records import read_records

    records = read_records(tmp_path / "run")
    assert len(records) >= 4 and all(r.prompt_nonce for r in records)
    assert len({(r.prompt, r.prompt_nonce) for r in records}) == len(records)
    assert summary.metrics.requests.unique_prompts
    # no prefix cache answered any of them: every finished request says 0 cached tokens (per record,
    # so a window a loaded box shortened, whose cached_share has no completed request, still shows it)
    finished = [r for r in records if r.cached_tokens is not None]
    assert finished and all(r.cached_tokens == 0 for r in finished)
    assert summary.metrics.tokens.cached_share in (0.0, None)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    for record in records[:6]:
        prompt = next(p for p in config["prompts"] if p["name"] == record.prompt)
        assert len(counter.encode(record.prompt_nonce + prompt["text"])) == 64


def test_window_opens_at_steady_state(timed_target, tmp_path):
    """4 users spawned 0.25 s apart, TTFT 1 s, ITL 20 ms, streams far longer than the run: the true
    steady rate is 4 / ITL = 200 tok/s. A window opened at spawning_complete read 171 (-14%)."""
    target, _ = timed_target
    summary = run_scenario(target, scenario(users=4, spawn_rate=4, max_tokens=2000, duration_s=4.0, kind="concurrency"),
                           tmp_path / "run", counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False, settle_s=2.0)
    metrics = summary.metrics
    assert metrics.requests.completed == 0 and metrics.requests.cut_by_window == 4
    assert metrics.window.steady, metrics.window
    assert within(metrics.output_tok_s, 4 / ITL), metrics.output_tok_s
    assert metrics.window.seconds >= 3.5 and metrics.window.kept_fraction < 1


def test_two_tokens_per_chunk_are_counted_as_tokens(tmp_path):
    """MTP / speculative decoding put several tokens in a chunk: continuous usage counts them
    exactly, also in streams the window cuts (a chunk count read 244 tok/s for a true 282)."""
    port = free_port()
    server = start_timed_server(port, "--tokens-per-chunk", "2")
    record = BootRecord(boot_id="chunks", ref="timed", recipe="tiny-cpu", variant=None, driver="test",
                        base_url=f"http://127.0.0.1:{port}", boot_dir=str(tmp_path / "boot"), log_path="", manifest_dir="",
                        served_model="timed")
    try:
        summary = run_scenario(LoadTarget(load("tiny-cpu"), record, None),
                               scenario(users=4, spawn_rate=4, max_tokens=2000, duration_s=4.0, kind="concurrency"),
                               tmp_path / "run", counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False, settle_s=2.0)
    finally:
        server.kill()
        server.wait()
    metrics = summary.metrics
    assert metrics.tokens.per_chunk == "continuous usage"
    assert within(metrics.output_tok_s, 4 / ITL), metrics.output_tok_s
    from rig.load.records import read_records

    records = read_records(tmp_path / "run")
    assert all(r.chunk_tokens and set(r.chunk_tokens) == {2} for r in records), [r.chunk_tokens[:5] for r in records]


def test_stalled_client_is_invalid_or_right(timed_target, tmp_path):
    """SIGSTOP the Locust process for 100-300 ms, several times: the run is either within 2% of the
    truth or INVALID and names the stall; never 'ok' with wrong figures."""
    import os
    import signal
    import threading

    import psutil

    target, _ = timed_target
    out = tmp_path / "run"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(summary=run_scenario(
        target, scenario(duration_s=6.0), out, counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False)))
    thread.start()
    me = psutil.Process()
    locust = None
    for _ in range(100):
        found = [p for p in me.children(recursive=True) if "locust" in " ".join(p.cmdline())]
        if found and (out / "window.jsonl").exists():
            locust = found[0]
            break
        time.sleep(0.05)
    assert locust is not None
    time.sleep(2.5)
    for pause in (0.1, 0.3, 0.2, 0.3, 0.15):
        os.kill(locust.pid, signal.SIGSTOP)
        time.sleep(pause)
        os.kill(locust.pid, signal.SIGCONT)
        time.sleep(0.4)
    thread.join(timeout=60)
    summary = result["summary"]
    figures = {"user_decode_tok_s": (summary.metrics.user_decode_tok_s.token_weighted, 1 / ITL),
               "ttft_p50_ms": (summary.metrics.ttft_s.p50, TTFT)}
    for name, (value, truth) in figures.items():
        bound = summary.client.figures[name]
        if bound.holds:  # within its bound of the truth (the server's own timing adds up to 0.2%)
            assert abs(truth / value - 1) <= bound.bound + 0.002, (name, value, bound)
        else:  # named unusable, with the figure and how far the client could have moved it
            assert bound.reason and any(name in problem for problem in summary.problems(name)), summary.client
    if not summary.client.valid:
        assert any("user_decode_tok_s" in reason for reason in summary.client.reasons), summary.client


def test_distributed_run_master_and_workers(timed_target, tmp_path):
    from rig.load.records import read_records

    target, _ = timed_target
    summary = run_scenario(target, scenario(users=6, distributed=True, spawn_rate=6, kind="concurrency", duration_s=3.0),
                           tmp_path / "run", workers=2, counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False, settle_s=2.0)
    assert summary.provenance.client.workers == 2 and summary.provenance.client.distributed
    assert len(list((tmp_path / "run").glob("records-*.jsonl"))) == 2
    assert summary.client.processes == 2
    assert summary.client.lag_probes == [LAG_PROBE_KERNEL]  # each worker says which event its lag was timed on
    # the master's own loop is monitored too (its stalls start later batches late), in a file of its own
    master = read_dispatcher(tmp_path / "run")
    assert master is not None and master.lag and master.process not in {c.process for c in read_clients(tmp_path / "run")}
    # each user's first request says when the master sent the spawn message that started it, and when
    # its opening call began and was read (the aggregate's bound reads the spawn's hold-up from them)
    firsts = {}
    for r in sorted(read_records(tmp_path / "run"), key=lambda r: r.t_send):
        first = firsts.setdefault(r.user, r)
        if r is not first:
            assert r.t_dispatched is None and r.dispatch_behind is None and r.opening is None, r
    assert len(firsts) == 6 and all(r.t_dispatched is not None and r.opening is not None and r.dispatch_behind is not None
                                    for r in firsts.values()), firsts
    assert all(r.t_dispatched <= r.opening[0] <= r.opening[1] <= r.t_send for r in firsts.values()), firsts
    itl_p50_is_the_truth_or_named_unusable(summary)


def test_a_local_runs_records_say_which_round_of_the_spawn_started_each_user(timed_target, tmp_path):
    """Locust's local runner paces the spawn's rounds on the process's own loop (two users a second
    here): each user's first record says which round started it and how far that round ran behind
    the pace (rig.load.client.patches.record_local_rounds), so the aggregate's bound counts the rounds' late
    wake-ups, however short."""
    from rig.load.records import read_records

    target, _ = timed_target
    summary = run_scenario(target, scenario(users=4, spawn_rate=2, kind="concurrency", duration_s=3.0), tmp_path / "run",
                           counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False, settle_s=2.0)
    assert not summary.provenance.client.distributed and summary.client.processes == 1
    firsts = {}
    for r in sorted(read_records(tmp_path / "run"), key=lambda r: r.t_send):
        first = firsts.setdefault(r.user, r)
        if r is not first:
            assert r.t_dispatched is None and r.dispatch_behind is None and r.opening is None, r
    rounds = sorted({r.t_dispatched for r in firsts.values()})
    assert len(firsts) == 4 and len(rounds) == 2, firsts  # two rounds of two users, dispatch_wait(2) = 1 s apart
    assert sorted(sum(r.t_dispatched == t for r in firsts.values()) for t in rounds) == [2, 2], firsts
    for r in firsts.values():
        behind = max(0.0, r.t_dispatched - rounds[0] - rounds.index(r.t_dispatched) * dispatch_wait(2))
        assert r.dispatch_behind == pytest.approx(behind, abs=1e-9) and r.opening is not None, r
        assert r.t_dispatched <= r.opening[0] <= r.opening[1] <= r.t_send, r
    itl_p50_is_the_truth_or_named_unusable(summary)


def test_server_dying_mid_run_keeps_records_and_counts_errors(tmp_path):
    port = free_port()
    server = start_timed_server(port, "--die-after", "2.5")
    record = BootRecord(boot_id="dies", ref="timed", recipe="tiny-cpu", variant=None, driver="test",
                        base_url=f"http://127.0.0.1:{port}", boot_dir=str(tmp_path / "boot"), log_path="", manifest_dir="",
                        served_model="timed")
    try:
        summary = run_scenario(LoadTarget(load("tiny-cpu"), record, None), scenario(users=2, duration_s=5.0),
                               tmp_path / "run", counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False)
    finally:
        server.kill()
        server.wait()
    from rig.load.records import read_records

    requests = summary.metrics.requests
    assert sum(r.complete for r in read_records(tmp_path / "run")) >= 2
    errors = requests.errors
    assert sum(n for kind, n in errors.items() if kind != "cut_by_window") >= 1, errors
    assert set(errors) <= {"stream_cut", "connection", "cut_by_window", "ChunkedEncodingError", "ConnectionError"}
    written = json.loads(Path(tmp_path / "run" / "summary.json").read_text())
    assert written["metrics"]["requests"]["total"] == requests.total


def test_a_worker_on_another_machine_ships_its_records_to_the_master(timed_target, tmp_path):
    """A remote worker sees no run directory, so its records travel in Locust's worker reports."""
    import os
    import re
    import threading

    target, _ = timed_target
    out = tmp_path / "run"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(summary=run_scenario(
        target, scenario(users=4, distributed=True, spawn_rate=4, kind="concurrency", duration_s=3.0), out, workers=1,
        counter=FixedPrompts("fixed test prompts"), prompts=PROMPTS, progress=False, remote_workers=1, settle_s=2.0)))
    thread.start()
    for _ in range(200):
        if (out / "remote-worker.txt").exists():
            break
        time.sleep(0.05)
    port = re.search(r"--master-port (\d+)", (out / "remote-worker.txt").read_text()).group(1)
    elsewhere = json.loads((out / "config.json").read_text()) | {"out_dir": str(tmp_path / "not-on-this-machine")}
    (tmp_path / "remote-config.json").write_text(json.dumps(elsewhere))
    worker = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(REPO / "loadtests" / "locustfile.py"), "--worker",
                               "--master-host", "127.0.0.1", "--master-port", port],
                              env={**os.environ, "RIG_LOAD_CONFIG": str(tmp_path / "remote-config.json")}, cwd=tmp_path)
    thread.join(timeout=120)
    worker.wait(timeout=30)
    summary = result["summary"]
    assert not (tmp_path / "not-on-this-machine").exists()
    assert len(list(out.glob("records-*.jsonl"))) == 2 and len(list(out.glob("client-*.json"))) == 2
    assert summary.metrics.requests.completed >= 4
    itl_p50_is_the_truth_or_named_unusable(summary)
