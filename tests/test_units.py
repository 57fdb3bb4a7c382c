"""The shared helpers: atomic writes, redaction, process identity, strict YAML."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from rig.atomic import write_text_atomic
from rig.boot import process as kernel
from rig.redaction import REDACTED, recordable_keys, redact, redact_for, split_recordable
from rig.strict_yaml import YamlRefused, load_strict


def test_atomic_write_replaces_whole_and_keeps_the_mode(tmp_path):
    path = tmp_path / "sub" / "state.json"
    write_text_atomic(path, "first")
    assert path.read_text() == "first"
    os.chmod(path, 0o600)
    write_text_atomic(path, "second ü")
    assert path.read_text(encoding="utf-8") == "second ü" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]  # no temp file left


def test_atomic_write_interrupted_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "boot.json"
    write_text_atomic(path, "complete old record")

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(path, "new record that never lands")
    assert path.read_text() == "complete old record"
    assert [p.name for p in tmp_path.iterdir()] == ["boot.json"]


def test_atomic_write_killed_mid_write_never_truncates(tmp_path):
    """A writer SIGKILLed in a loop of large writes: the file always parses as one whole version."""
    path = tmp_path / "big.txt"
    script = (f"import sys; sys.path.insert(0, {str(os.getcwd())!r}); from rig.atomic import write_text_atomic\n"
              f"i = 0\nwhile True:\n    i += 1\n    write_text_atomic({str(path)!r}, str(i % 10) * 2_000_000)\n")
    writer = subprocess.Popen([sys.executable, "-c", script])
    try:
        seen = set()
        while len(seen) < 3:
            if path.exists():
                text = path.read_text()
                assert len(text) == 2_000_000 and len(set(text)) == 1
                seen.add(text[0])
    finally:
        writer.kill()
        writer.wait()
    text = path.read_text()
    assert len(text) == 2_000_000 and len(set(text)) == 1


def test_redact_keeps_only_allowed_values():
    env = {"HF_TOKEN": "hf_secret", "RIG_TOKEN_DELAY_MS": "5", "OMP_NUM_THREADS": "2", "RIG_IMAGE_TAG": "v2"}
    assert redact(env, {"RIG_TOKEN_DELAY_MS"}) == {"HF_TOKEN": REDACTED, "RIG_TOKEN_DELAY_MS": "5",
                                                   "OMP_NUM_THREADS": REDACTED, "RIG_IMAGE_TAG": REDACTED}
    assert env["HF_TOKEN"] == "hf_secret"  # a copy, the input is untouched

    from rig.deploy.recipe import load

    resolved = load("tiny-cpu")
    allowed = recordable_keys(resolved)
    assert {"RIG_TOKEN_DELAY_MS", "DSV41_SHARED_PAD_K", "DSV41_SHARED_PAD_BUF_ROWS", "RIG_W4A8_PAD", "RIG_MXFP8_B12X",
            "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "RIG_IMAGE_TAG"} <= allowed
    assert "HF_TOKEN" not in allowed and "RIG_API_KEY" not in allowed
    assert redact_for(resolved, env) == {**env, "HF_TOKEN": REDACTED}
    recordable, secret = split_recordable(env, allowed)
    assert secret == {"HF_TOKEN": "hf_secret"} and "HF_TOKEN" not in recordable


def test_process_identity_tells_a_reused_pid_apart():
    child = subprocess.Popen(["sleep", "30"], start_new_session=True, env={**os.environ, "RIG_BOOT_ID": "boot-a"})
    try:
        # Until the child has exec'd, /proc shows the parent's environment: wait for `sleep` itself
        # (on a loaded box the fork-to-exec window is long enough to be read).
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        while child.poll() is None and cmdline.read_bytes().split(b"\0")[0] != b"sleep":
            time.sleep(0.001)
        me = kernel.identity(child.pid)
        assert me is not None and me.kernel_boot == kernel.kernel_boot_time()
        assert abs(me.started - __import__("time").time()) < 30
        assert kernel.check(child.pid, me, "boot-a") == ("ours", f"pid {child.pid} is boot boot-a")
        verdict, why = kernel.check(child.pid, kernel.Identity(me.start_ticks - 1, me.kernel_boot), "boot-a")
        assert verdict == "other" and "another process" in why
        verdict, why = kernel.check(child.pid, me, "boot-b")
        assert verdict == "other" and "RIG_BOOT_ID=boot-a" in why
        assert kernel.check(child.pid, None, "boot-a")[0] == "other"
        assert kernel.process_group(child.pid) == child.pid and kernel.group_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert kernel.check(child.pid, me, "boot-a")[0] == "gone" and kernel.identity(child.pid) is None


def test_process_identity_with_a_parenthesis_in_the_command_name(tmp_path):
    odd = tmp_path / "a) b ("
    odd.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(odd), "30"])
    try:
        assert kernel.identity(child.pid) is not None and kernel.process_group(child.pid) == os.getpgid(child.pid)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("data,problem", [
    (b"a: 1\nb: 2\na: 3\n", "duplicate key 'a' (first on line 1)"),
    (b"a:\n  x: 1\n  x: 2\n", "duplicate key 'x'"),
    (b"a: &x [1]\nb: *x\n", "aliases"),
    (b"\xef\xbb\xbfa: 1\n\xff", "not UTF-8"),
])
def test_strict_yaml_refuses(data, problem):
    with pytest.raises(YamlRefused, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_strict(data)


def test_b12x_falls_back_on_flashinfers_own_exception(monkeypatch):
    """FlashInfer's backend_requirement raises flashinfer.utils.BackendSupportedError (an
    Exception, not a RuntimeError) for an unsupported backend or compute capability."""
    import torch

    from rig_adapters.adapters import mxfp8_b12x
    from rig_adapters.registry import BY_NAME
    from rig_adapters.runtime import AdapterContext

    class BackendSupportedError(Exception):
        pass

    class LibraryError(Exception):
        pass

    utils = types.ModuleType("flashinfer.utils")
    utils.BackendSupportedError, utils.LibraryError = BackendSupportedError, LibraryError
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.utils", utils)
    mxfp8_b12x.refusal_errors.cache_clear()
    monkeypatch.setattr(mxfp8_b12x, "device_capability", lambda device: (12, 0))
    mxfp8_b12x.REJECTED.clear()
    calls = []

    def upstream(input, weight, weight_scale, input_scale=None, bias=None, output_dtype=None, backend="cutlass", pin_tactic=False):
        calls.append(backend)
        if backend == "b12x":
            raise BackendSupportedError("mm_mxfp8 does not support backend 'b12x' with capability 120")
        return "stock"

    try:
        spec = BY_NAME["mxfp8_b12x"]
        module = types.SimpleNamespace(flashinfer_mxfp8_blockscaled_linear=upstream)
        mxfp8_b12x.install_linear(AdapterContext(spec, spec.targets[0], module))
        assert module.flashinfer_mxfp8_blockscaled_linear(torch.randn(2, 640), torch.zeros(256, 640), None) == "stock"
        assert calls == ["b12x", "cutlass"] and (256, 640) in mxfp8_b12x.REJECTED
        assert BackendSupportedError in mxfp8_b12x.refusal_errors() and LibraryError in mxfp8_b12x.refusal_errors()
    finally:
        mxfp8_b12x.REJECTED.clear()
        mxfp8_b12x.refusal_errors.cache_clear()


def test_b12x_fallback_without_flashinfer_is_the_builtins(monkeypatch):
    from rig_adapters.adapters import mxfp8_b12x

    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer -> ImportError
    mxfp8_b12x.refusal_errors.cache_clear()
    try:
        assert mxfp8_b12x.refusal_errors() == (RuntimeError, ValueError, NotImplementedError)
    finally:
        mxfp8_b12x.refusal_errors.cache_clear()


def test_compose_override_passes_a_secret_through_the_process_environment(tmp_path):
    """What compose.py's override should do: the container gets the value, the file does not."""
    import json

    import yaml
    from conftest import compose_binary

    from rig.redaction import compose_environment

    planted = "sk-planted-compose-$1"
    entries, process_env = compose_environment({"HF_TOKEN": planted, "RIG_TOKEN_DELAY_MS": "5$"}, {"RIG_TOKEN_DELAY_MS"})
    assert entries == ["RIG_TOKEN_DELAY_MS=5$$", "HF_TOKEN"] and process_env == {"HF_TOKEN": planted}
    base = tmp_path / "compose.yaml"
    base.write_text(yaml.safe_dump({"services": {"server": {"image": "x", "environment": {"A": "1"}}}}))
    override = tmp_path / "compose.override.yaml"
    override.write_text(yaml.safe_dump({"services": {"server": {"environment": entries}}}))
    assert planted not in override.read_text()
    result = subprocess.run([compose_binary(), "-f", str(base), "-f", str(override), "config", "--format", "json"],
                            capture_output=True, text=True, env={**os.environ, **process_env}, check=False)
    assert result.returncode == 0, result.stderr
    environment = json.loads(result.stdout)["services"]["server"]["environment"]
    literal = {key: value.replace("$$", "$") for key, value in environment.items()}  # `config` prints $ escaped
    assert literal == {"A": "1", "HF_TOKEN": planted, "RIG_TOKEN_DELAY_MS": "5$"}


def test_readers_raise_error_kinds_callers_can_branch_on(tmp_path):
    """NotFound for what is not there, Damaged for what is there but unreadable, Invalid for a value
    that breaks a rule: every one a RigError of one line."""
    from rig.compare.model import ComparePlan
    from rig.errors import Damaged, Invalid, NotFound, RigError
    from rig.load.scenarios import load_scenario

    with pytest.raises(NotFound):
        ComparePlan.read(tmp_path)
    (tmp_path / "plan.json").write_text('{"schema": 6, "recipe": ')
    with pytest.raises(Damaged):
        ComparePlan.read(tmp_path)
    scenario = tmp_path / "mine.yaml"
    scenario.write_text("schema: 1\nname: mine\nversion: 1\nkind: decode\nendpoint: chat\nprompt_set: prose\nprompt_tokens: 64\n"
                        "max_tokens: 32\ntemperature: 0\nseed: 1\nusers: -3\nduration_s: 5\n")
    with pytest.raises(Invalid) as caught:
        load_scenario(str(scenario))
    assert isinstance(caught.value, RigError) and "\n" not in str(caught.value) and caught.value.field == "users"


@pytest.mark.parametrize("value", ["/", "/etc", "/usr", "/tmp", "/var"])
def test_a_results_directory_in_a_system_path_is_refused(monkeypatch, value):
    from rig import paths
    from rig.errors import Invalid

    monkeypatch.setenv("RIG_RESULTS_DIR", value)
    with pytest.raises(Invalid, match="RIG_RESULTS_DIR: '.*' is a system directory"):
        paths.results_dir()


def test_an_empty_results_directory_variable_means_the_default(monkeypatch, tmp_path):
    from rig import paths

    monkeypatch.setenv("RIG_RESULTS_DIR", "")
    assert paths.results_dir() == paths.REPO_ROOT / "results"
    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "mine"))
    assert paths.results_dir() == tmp_path / "mine" and paths.boots_dir() == tmp_path / "mine" / "boots"


@pytest.mark.parametrize("spelled", ["mine", "./mine", "other/../mine", "mine/", "{cwd}/mine"])
def test_a_relative_results_directory_is_one_directory_however_spelled(monkeypatch, tmp_path, spelled):
    """A boot record names its paths under the results directory and rig checks them against it: a
    relative RIG_RESULTS_DIR is the absolute path from where rig started, so `mine` and `./mine` are
    one directory (compared as spelled, a boot started with one read as started elsewhere)."""
    from rig import paths

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RIG_RESULTS_DIR", spelled.format(cwd=Path.cwd()))
    assert paths.results_dir() == Path.cwd() / "mine" and paths.boots_dir() == Path.cwd() / "mine" / "boots"


def test_a_server_that_exited_unreaped_is_not_up(tmp_path):
    """A native server killed where nobody reaps it (PID 1 of a container that reaps nothing) stays a
    zombie that answers kill(0): `rig status` must say it is down, and `rig up` may boot again."""
    import subprocess

    from rig.boot import process as kernel
    from rig.boot.native import NativeDriver
    from rig.boot.record import BootRecord

    child = subprocess.Popen(["sh", "-c", "exit 0"], start_new_session=True, env={"RIG_BOOT_ID": "z"})
    try:
        started = kernel.identity(child.pid)
        record = BootRecord(boot_id="z", ref="tiny-cpu", recipe="tiny-cpu", variant=None, driver="native",
                            base_url="http://127.0.0.1:9", boot_dir=str(tmp_path), log_path="", manifest_dir="", served_model="m",
                            pid=child.pid, pid_start_ticks=started.start_ticks, kernel_boot_time=started.kernel_boot)
        for _ in range(3000):  # until it has exited (and, not waited for, stays a zombie)
            if kernel.exited(child.pid):
                break
            time.sleep(0.01)
        assert kernel.exited(child.pid)
        assert "zombie" in (NativeDriver().alive(record) or ""), NativeDriver().alive(record)
    finally:
        child.wait()


def test_a_warmup_runs_notes_say_they_are_the_warmups():
    """The loadtest prints every run's notes, the discarded warmup's too: each says which run it is of."""
    import numpy as np
    from simulated_runs import round_result, simulate_round

    from rig.load.report import notes

    _, measured = round_result(simulate_round(np.random.default_rng(1), 0.02, 0.1, 4.0), 4.0, None)
    warmup = measured.model_copy(update={"warmup": True})
    assert all(line.startswith(f"{measured.name} (warmup, discarded): ") for line in notes(warmup)), notes(warmup)
    assert all(line.startswith(f"{measured.name}: ") for line in notes(measured)), notes(measured)


def test_a_second_interrupt_during_the_stop_grace_kills_the_server_group():
    """Ctrl-C while rig waits for a server to stop (it ignores SIGTERM) lets the stop go on in order;
    a second one kills the group at once, and the interrupt is raised, the server not left running."""
    import signal
    import subprocess

    from rig.boot import process as kernel
    from rig.boot.native import _stop_group

    child = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], start_new_session=True)
    term = 1 << (signal.SIGTERM - 1)  # SigIgn is a mask of the signals ignored, bit n-1 for signal n
    for _ in range(6000):  # until the shell has set its trap: it may start with other signals ignored
        # (inherited from the test process), and a SIGTERM before the trap ended it at once (CI of 9f877ff)
        if int(Path(f"/proc/{child.pid}/status").read_text().split("SigIgn:")[1].split()[0], 16) & term:
            break
        time.sleep(0.01)
    else:
        child.kill()
        pytest.fail("the shell never ignored SIGTERM")

    interrupts = []

    def interrupt(signum, frame):  # exactly two: the timer stops itself, so no third lands outside the test
        interrupts.append(signum)
        if len(interrupts) == 2:
            signal.setitimer(signal.ITIMER_REAL, 0)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5, 0.5)  # inside the grace (seconds): a Ctrl-C, then another
    try:
        with pytest.raises(KeyboardInterrupt):
            _stop_group(child.pid)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        alive = kernel.group_alive(child.pid)
        if alive:  # a failing run must not leave its SIGTERM-ignoring group behind
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert not alive and len(interrupts) == 2


@pytest.mark.parametrize("how", ["terminate", "kill"])
def test_the_timed_servers_worker_processes_end_with_it(how):
    """`--processes N` serves from N forked workers: terminate() stops them with the parent, and a
    parent killed outright takes them along (else they keep the port and the caller's pipes)."""
    import signal

    from conftest import free_port

    from rig.testing import timed_server

    server, _ = timed_server.start(free_port(), "--processes", "3")
    workers = [int(pid) for pid in Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()]
    assert len(workers) == 3
    server.send_signal(signal.SIGTERM if how == "terminate" else signal.SIGKILL)
    server.wait(timeout=30)
    for _ in range(3000):  # until the kernel has delivered the parent-death signal and the workers are reaped
        if not any(Path(f"/proc/{pid}").exists() and kernel.identity(pid) and not kernel.exited(pid) for pid in workers):
            break
        time.sleep(0.01)
    assert [pid for pid in workers if Path(f"/proc/{pid}").exists() and not kernel.exited(pid)] == []


def test_the_loadtest_table_marks_a_figure_the_clients_timing_could_move_beyond_its_limit(tmp_path):
    """summary.md's table showed TTFT and ITL beside 'usable yes' while the note below called them
    NOT USABLE: the cell itself now says so, and the table says what the mark means."""
    from conftest import synthetic_run

    from rig.load.client_error import BOUNDS
    from rig.load.report import COLUMN_FIGURES, COLUMNS, markdown_table
    from rig.load.summary import ClientBound, RunSummary

    # every marked column is a column, and every figure it names is one the client bounds (a typo would never mark)
    assert set(COLUMN_FIGURES) <= {name for name, _ in COLUMNS} and set(COLUMN_FIGURES.values()) <= set(BOUNDS)

    synthetic_run(tmp_path / "run")
    summary = RunSummary.read(tmp_path / "run")
    figures = {"user_decode_tok_s": ClientBound(bound=0.001, limit=0.05, holds=True),
               "itl_p50_ms": ClientBound(bound=0.6, limit=0.05, holds=False, reason="lag"),
               "ttft_p50_ms": ClientBound(bound=0.05, limit=0.05, holds=True)}
    summary = summary.model_copy(update={"client": summary.client.model_copy(update={"figures": figures})})
    header, _, cells, *rest = markdown_table([summary]).splitlines()
    columns = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in cells.strip("|").split("|")], strict=True))
    assert columns["ITL p50 ms"] == "10.00 (client)" and columns["TTFT p50 ms"] == "50.00" and columns["user tok/s"] != "-"
    assert not columns["user tok/s"].endswith("(client)")
    assert rest[-1].startswith("(client): the client's own timing could move this figure beyond its limit, so it is not usable")


def test_a_sweeps_table_marks_what_its_load_test_calls_unusable_and_its_knee_stops_there(tmp_path):
    """A sweep's cells carry the load test's mark: a figure its run's own summary.md calls NOT USABLE
    (the client's timing could move it beyond its limit) is never printed beside 'usable yes', and a
    goodput share counting a latency the client could move ends the knee's walk."""
    from conftest import synthetic_run

    from rig.load.client_error import BOUNDS
    from rig.load.figures import HEADLINE
    from rig.load.goodput import SLO_KEYS, Goodput
    from rig.load.report import UNBOUND_LEGEND, UNBOUND_MARK
    from rig.load.summary import ClientBound, RunSummary
    from rig.loadrun.sweep import BOUNDED_COLUMNS, COLUMNS, SLO_COLUMNS, knee, point_row, table

    assert set(BOUNDED_COLUMNS) <= {name for name, _ in COLUMNS} and set(BOUNDED_COLUMNS.values()) <= set(BOUNDS)
    assert set(SLO_COLUMNS) == set(SLO_KEYS) and {c for columns in SLO_COLUMNS.values() for c in columns} <= set(BOUNDED_COLUMNS)
    synthetic_run(tmp_path / "run")
    summary = RunSummary.read(tmp_path / "run")
    assert not summary.problems() and HEADLINE[summary.kind].name not in ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms")
    figures = {**summary.client.figures,  # figures beside the headline: the run stays usable, they do not
               "output_tok_s": ClientBound(bound=0.13, limit=0.01, holds=False, reason="lag"),
               "ttft_p50_ms": ClientBound(bound=0.29, limit=0.01, holds=False, reason="lag"),
               "tpot_p50_ms": ClientBound(bound=0.001, limit=0.01, holds=True)}
    summary = summary.model_copy(update={"client": summary.client.model_copy(update={"figures": figures})})
    assert not summary.problems()
    good = Goodput(slos_s={"tpot": 0.05}, requests_per_s=1.0, met=10, completed=10, share=1.0)
    row = point_row(4.0, summary, good, tmp_path / "run")
    assert row.client_unusable == ["output_tok_s", "ttft_p50_ms"] and not row.problems  # the tpot SLO counts no moved figure
    printed = table([row], "concurrency (users)").splitlines()
    assert f"{row.output_tok_s:,.1f}{UNBOUND_MARK}" in printed[2] and "| yes |" in printed[2]
    assert printed[-1].startswith(UNBOUND_LEGEND)
    ttft = point_row(4.0, summary, good.model_copy(update={"slos_s": {"ttft": 2.0}}), tmp_path / "run")
    assert ttft.problems == ["goodput: the client's timing could move ttft_p50_ms beyond its limit, and the ttft SLO counts those requests"]
    assert knee([row, ttft], 0.9).load == 4.0 and "not usable" in knee([ttft], 0.9).status


def test_a_results_directory_that_is_a_file_is_refused_in_one_line_naming_the_variable(monkeypatch, tmp_path):
    """A RIG_RESULTS_DIR naming a file is refused when it is read, naming the variable, not once a boot
    has started, naming a path below it ('.../boots/<boot>/manifests: Not a directory')."""
    from rig import paths
    from rig.errors import Invalid

    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "afile"))
    with pytest.raises(Invalid) as caught:
        paths.results_dir()
    assert caught.value.field == "RIG_RESULTS_DIR" and "is not a directory" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "missing"))
    assert paths.results_dir() == tmp_path / "missing"  # a directory still to create is fine


def test_a_comparisons_unknown_scenario_is_refused_without_offering_a_file(tmp_path, monkeypatch):
    """`rig compare ... --scenario nope` does not offer 'the path of a .yaml file', which a comparison
    refuses: its own line names the scenarios and where a file of one's own goes."""
    from rig.compare.command import CompareRequest, compare
    from rig.errors import RigError

    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path))
    with pytest.raises(RigError) as caught:
        compare(CompareRequest("tiny-cpu", ["a:RIG_TOKEN_DELAY_MS=0", "b:RIG_TOKEN_DELAY_MS=1"], boots=1, rounds=1, scenarios=["nope"]))
    assert caught.value.field == "--scenario" and "prose-c1" in caught.value.fix and ".yaml file" not in caught.value.fix
    assert "loadtests/scenarios/" in caught.value.fix and not any(tmp_path.iterdir())
