"""Property: what rig wrote and reads back (records, a run's summary, a comparison's plan
and boot entries, boot records and state files), a peer's result for `rig import`, and a trace, each
with random fields replaced, removed or added, or its bytes cut or spliced, is either read as a
valid document or refused as a RigError of one line: never another exception, and nothing is
written except where the command writes its own results."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from conftest import recorded_writes, synthetic_run, writes_outside
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rig.compare.arms import parse_arm
from rig.compare.model import BootEntry, ComparePlan, RunResult
from rig.errors import RigError

SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

HOSTILE_TEXT = ["", "\n", "\x00", "\u202e", "../../etc/passwd", "/dev/zero", "NaN", "a" * 300, "rig-tiny-cpu", "native",
                "compose", "20261201-135107-tiny-cpu-0b2b", "prose-c1", "\ud800"]
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([0, -1, 1, 2**31, 2**63, 1 << 24, 10**9]),
    st.floats(), st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -0.0, 5e-324]),
    st.text(max_size=12), st.sampled_from(HOSTILE_TEXT),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner,
                                                                                                      max_size=3)), max_leaves=6)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    if isinstance(node, dict):
        found += [p for key, item in node.items() for p in _paths(item, (*path, key))]
    elif isinstance(node, list):
        found += [p for index, item in enumerate(node) for p in _paths(item, (*path, index))]
    return found


@st.composite
def mutated(draw: st.DrawFn, document: Any) -> bytes:
    """`document` with 1-4 changes: a value replaced, a key removed or added, a list emptied or
    grown; or its JSON bytes cut short or spliced with other bytes."""
    data = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)
        if not paths:
            break
        *parents, last = draw(st.sampled_from(paths))
        node = data
        for part in parents:
            node = node[part]
        action = draw(st.integers(0, 5))
        if action == 0 and isinstance(node, dict):
            del node[last]
        elif action == 1 and isinstance(node, dict):
            node[draw(st.text(max_size=8))] = draw(values)
        elif action == 2 and isinstance(node[last], list):
            node[last] = node[last] * draw(st.sampled_from([0, 2, 50]))
        elif action == 3 and isinstance(node, dict):  # every list beside it emptied or doubled at once (they agree)
            times = draw(st.sampled_from([0, 2]))
            for key, item in node.items():
                if isinstance(item, list):
                    node[key] = item * times
        else:
            node[last] = draw(values)
    text = json.dumps(data, allow_nan=True, ensure_ascii=draw(st.booleans()))
    raw = text.encode("utf-8", errors="surrogatepass")
    splice = draw(st.integers(0, 5))
    if splice == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif splice == 1:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(max_size=8)) + raw[at:]
    return raw


def _outcome(read: Callable[[], Any]) -> str:
    """"read" or "refused"; a refusal is one line naming its fix. Any other exception fails the property."""
    try:
        read()
    except RigError as error:
        assert "\n" not in str(error) and "\r" not in str(error) and "fix: " in str(error), str(error)
        return "refused"
    return "read"


def _reading(root: Path, read: Callable[[], Any], allowed: list[Path]) -> str:
    with recorded_writes() as writes:
        outcome = _outcome(read)
    assert not writes_outside(writes, allowed), writes_outside(writes, allowed)
    if outcome == "refused":
        assert all(not Path(w).exists() or Path(w).is_relative_to(root / "kept-aside") for w in writes), writes
    return outcome


def _reading_file(name: str, raw: bytes, read: Callable[[Path], Any]) -> str:
    """_reading() of one file `name` holding `raw`, alone in a fresh folder."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(raw)
        return _reading(Path(folder), lambda: read(path), [])


# ---- records and a run's summary (`rig export`, comparisons) ------------------------------------------

def _run_template() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "run"
        synthetic_run(run, requests=3)
        records = [json.loads(line) for line in (run / "records-p.jsonl").read_text().splitlines()]
        return records, json.loads((run / "summary.json").read_text())


RECORDS, SUMMARY = _run_template()


@SETTINGS
@given(st.integers(0, len(RECORDS) - 1), st.data())
def test_a_damaged_records_file_is_read_or_refused_in_one_line(line, data):
    from rig.load.records import read_records

    raw = data.draw(mutated(RECORDS[line]))
    lines = [json.dumps(record).encode() for record in RECORDS]
    lines[line] = raw
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "records-p.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        event(_reading(run, lambda: read_records(run), []))


@SETTINGS
@given(st.data())
def test_a_damaged_run_exports_or_is_refused_in_one_line(data):
    from rig.load.peers import export_run

    raw = data.draw(mutated(SUMMARY))
    fmt = data.draw(st.sampled_from(["vllm", "aiperf"]))
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "results" / "tiny-cpu" / "t" / "prose-c1"
        synthetic_run(run, requests=3)
        (run / "summary.json").write_bytes(raw)
        with mock.patch.dict(os.environ, {"RIG_RESULTS_DIR": str(Path(folder) / "results")}):
            event(_reading(run, lambda: export_run(run, fmt), [run]))


# ---- a comparison's plan and boot entries (`rig compare --resume`) ------------------------------------

PLAN = json.loads(ComparePlan(recipe="tiny-cpu", arms=[parse_arm("a:RIG_TOKEN_DELAY_MS=0"), parse_arm("b:RIG_TOKEN_DELAY_MS=1")],
                              control=None, boots=1, rounds=1, scenarios=["prose-c1"], small=True).model_dump_json(by_alias=True))
ENTRY = json.loads(BootEntry(index=0, block=0, arm="a", spec="a:RIG_TOKEN_DELAY_MS=0", control=False, attempt=1,
                             rounds=[{"prose-c1": RunResult(scenario="prose-c1", dir="", figures={"user_decode_tok_s": 100.0},
                                                            problems=[])}]).model_dump_json(by_alias=True))


@SETTINGS
@given(st.data())
def test_a_damaged_plan_is_read_or_refused_in_one_line(data):
    event(_reading_file("plan.json", data.draw(mutated(PLAN)), lambda path: ComparePlan.read(path.parent)))


@SETTINGS
@given(st.data())
def test_a_damaged_boot_entry_is_read_or_refused_in_one_line(data):
    event(_reading_file("00-a.json", data.draw(mutated(ENTRY)), BootEntry.read))


# ---- boot records and state files (`rig down`, `rig logs`, `rig status`) -------------------------------

def _boot_record(results: Path) -> dict[str, Any]:
    boot_id = "20261201-135107-tiny-cpu-0b2b"
    boot_dir = results / "boots" / boot_id
    return {"schema": 1, "boot_id": boot_id, "ref": "tiny-cpu", "recipe": "tiny-cpu", "variant": None, "driver": "native",
            "base_url": "http://127.0.0.1:8321", "boot_dir": str(boot_dir), "log_path": str(boot_dir / "server.log"),
            "manifest_dir": str(boot_dir / "manifests"), "started": 1_700_000_000.0, "status": "healthy", "pid": 12345,
            "served_model": "tiny"}


@SETTINGS
@given(st.data())
def test_a_damaged_boot_record_is_read_or_refused_in_one_line(data):
    from rig.boot.record import BOOT_SCHEMA, BootRecord

    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results"
        template = {**_boot_record(results), "schema": BOOT_SCHEMA}
        raw = data.draw(mutated(template))
        state = Path(folder) / "state"
        state.mkdir()
        (state / "tiny-cpu.json").write_bytes(raw)
        with mock.patch.dict(os.environ, {"RIG_RESULTS_DIR": str(results), "RIG_STATE_DIR": str(state)}):
            event(_reading(state, lambda: BootRecord.load(state / "tiny-cpu.json"), []))


def test_the_boot_record_template_is_read():
    from rig.boot.record import BOOT_SCHEMA, BootRecord

    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results"
        (Path(folder) / "b.json").write_text(json.dumps({**_boot_record(results), "schema": BOOT_SCHEMA}))
        with mock.patch.dict(os.environ, {"RIG_RESULTS_DIR": str(results)}):
            assert BootRecord.load(Path(folder) / "b.json").pid == 12345


# ---- a peer's result (`rig import`) and a trace (`rig loadtest` of a trace scenario) --------------------

VLLM = {"completed": 2, "failed": 0, "duration": 1.0, "input_lens": [4, 4], "output_lens": [3, 3], "ttfts": [0.05, 0.06],
        "itls": [[0.01, 0.01], [0.01, 0.01]], "errors": ["", ""], "start_times": [0.0, 0.5], "model_id": "m"}
AIPERF = {"metadata": {"x_request_id": "r1", "x_correlation_id": "c1", "conversation_id": "c1", "turn_index": 0,
                       "request_start_ns": 1_700_000_000_000_000_000, "request_end_ns": 1_700_000_000_200_000_000,
                       "worker_id": "w", "benchmark_phase": "profiling", "was_cancelled": False},
          "metrics": {"time_to_first_token": {"value": 50.0, "unit": "ms"}, "inter_chunk_latency": {"value": [10.0, 10.0], "unit": "ms"},
                      "request_latency": {"value": 70.0, "unit": "ms"}, "output_sequence_length": {"value": 3, "unit": "tokens"},
                      "input_sequence_length": {"value": 4, "unit": "tokens"}}}


@SETTINGS
@given(st.sampled_from(["vllm", "aiperf"]), st.data())
def test_a_crafted_peer_result_is_imported_or_refused_in_one_line(tool, data):
    from rig.load.peers import import_file

    raw = data.draw(mutated(VLLM if tool == "vllm" else AIPERF))
    if tool == "aiperf":  # a second, intact line: a damaged one must not pass for the whole file
        raw = json.dumps(AIPERF).encode() + b"\n" + raw + b"\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("result.json" if tool == "vllm" else "profile_export.jsonl")
        path.write_bytes(raw)
        out = Path(folder) / "results" / "imported"
        with mock.patch.dict(os.environ, {"RIG_RESULTS_DIR": str(Path(folder) / "results")}):
            outcome = _reading(Path(folder), lambda: import_file(path, None, out, progress=False), [Path(folder) / "results"])
        if outcome == "refused":
            assert not out.exists()
        event(outcome)


def test_the_peer_templates_import():
    from rig.load.peers import import_file

    for name, raw in (("result.json", json.dumps(VLLM)), ("profile_export.jsonl", json.dumps(AIPERF) + "\n")):
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / name).write_text(raw)
            imported = import_file(Path(folder) / name, None, Path(folder) / "out", progress=False)
            assert imported is not None and (Path(folder) / "out" / "summary.json").exists()


TRACE_ROW = {"timestamp": 0, "input_length": 20, "output_length": 5, "hash_ids": [1, 2]}


@SETTINGS
@given(st.data())
def test_a_crafted_trace_is_read_or_refused_in_one_line(data):
    from rig.load.datasets import TRACE_FIX, TraceRow
    from rig.load.inputs import read_rows

    raw = json.dumps(TRACE_ROW).encode() + b"\n" + data.draw(mutated(TRACE_ROW)) + b"\n"
    event(_reading_file("trace.jsonl", raw, lambda path: read_rows(path, "trace.jsonl", TraceRow, TRACE_FIX)))
