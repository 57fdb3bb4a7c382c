"""The Locust client's parts that run without a Locust process: a worker's shipping to its master,
the arrival schedule's shares and its drain, and the shape of the package itself (one ClientProcess
owns the state: no module keeps mutable state of its own; the Locust file is a shim)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import REPO

from rig.load.client.monitor import Samples
from rig.load.client.schedule import ArrivalSchedule
from rig.load.client.shipping import Shipping
from rig.load.client.writer import RecordWriter
from rig.load.wire import LAG_PROBE_KERNEL, ClientStats, LoadConfig, Prompt
from rig.load.wire import ArrivalSchedule as Arrivals

CLIENT = REPO / "rig" / "load" / "client"
SHIM = REPO / "loadtests" / "locustfile.py"


def worker_samples() -> Samples:
    return Samples(lag=[(1.000049, 0.0012341), (1.01, 0.002)], cpu=[40.0, 60.0], cpu_time=[(2.0004, 0.5006)],
                   gc_pauses=[(3.0, 0.01)], lag_probe=LAG_PROBE_KERNEL)


def test_a_workers_records_and_samples_reach_its_master_whole(tmp_path):
    worker_writer = RecordWriter(str(tmp_path / "elsewhere"), "w-1", shipping=True)
    samples = worker_samples()
    expected = samples.stats("w-1")
    worker = Shipping("w-1", str(tmp_path / "elsewhere"), worker_writer, samples)
    worker_writer.write('{"id": "w-1-0"}')
    worker_writer.write('{"id": "w-1-1"}')
    report: dict = {}
    worker.ship("client", report)
    assert set(report["rig"]) == {"process", "records", "lag", "cpu", "cpu_time", "gc_pauses", "lag_probe"}
    json.dumps(report)  # Locust sends the report as msgpack: plain values only
    assert samples.lag == [] and worker_writer.outbox == []  # shipped once
    master = Shipping("m-1", str(tmp_path), RecordWriter(str(tmp_path), "m-1", shipping=False), Samples())
    master.receive("client", report)
    master.receive("client", {})  # a report without rig's part (Locust's own) is left alone
    assert (tmp_path / "records-w-1.jsonl").read_text() == '{"id": "w-1-0"}\n{"id": "w-1-1"}\n'
    assert master.stats() == {"w-1": expected}
    assert ClientStats.parse(expected.json_text(), "c") == expected


def test_samples_keep_the_rounding_of_the_client_file():
    stats = worker_samples().stats("p")
    assert stats.lag == [(1.0, 0.001234), (1.01, 0.002)] and stats.cpu_time == [(2.0, 0.501)]
    assert stats.cpu_percent_mean == 50.0 and stats.cpu_percent_max == 60.0 and stats.gc_pauses == [(3.0, 0.01)]
    assert Samples().stats("p").cpu_percent_mean is None


def config(offsets: list[float], processes: int) -> LoadConfig:
    return LoadConfig(scenario="s", kind="trace", base_url="http://127.0.0.1:1", model="m", endpoint="chat", max_tokens=8,
                      temperature=0.0, seed=1, prompts=[Prompt(name="p", text="t", tokens=4)], out_dir=".",
                      arrival_processes=processes, arrivals=Arrivals(offsets=offsets))


def test_each_process_takes_its_share_of_the_one_schedule_and_drains_once():
    drained: list[str] = []
    shares = []
    for worker in (0, 1):
        schedule = ArrivalSchedule(lambda worker=worker: drained.append(f"w{worker}"))
        schedule.load(config([0.0, 0.5, 1.0, 1.5, 2.0], 2), worker)
        schedule.start(100.0)
        claimed = []
        while (arrival := schedule.claim()) is not None:
            claimed.append(arrival)
        assert drained.count(f"w{worker}") == 0  # claimed, not yet answered
        for _ in claimed:
            schedule.finished_one()
        schedule.claim()  # a free user finds the schedule done again: the drain is not repeated
        shares.append(claimed)
    assert shares == [[(0, 100.0), (2, 101.0), (4, 102.0)], [(1, 100.5), (3, 101.5)]]
    assert drained == ["w0", "w1"]


def module_state(path: Path) -> list[str]:
    """Module-level names bound to a mutable value: a display, a comprehension, or a call (a class
    instance, a counter) that is not a frozen declaration of this package."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        if value is None:
            continue
        mutable = isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and not (isinstance(value.func, ast.Name) and value.func.id in {"Patch"}))
        if mutable:
            found += [f"{path.name}: {ast.unparse(target)}" for target in targets]
    return found


def test_no_module_of_the_client_keeps_state_of_its_own():
    """Everything a Locust process keeps lives on its ClientProcess; a module holds constants only."""
    assert [state for path in sorted(CLIENT.glob("*.py")) for state in module_state(path)] == []


def test_the_locust_file_is_a_shim():
    """Imports, the patch check, and the wiring of Locust's events to one ClientProcess: no code of its own."""
    tree = ast.parse(SHIM.read_text())
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "Import", "ImportFrom", "Assign"}, kinds
    assert module_state(SHIM) == ["locustfile.py: process", "locustfile.py: (LLMUser, ArrivalUser, ConversationUser)"]
    calls = [ast.unparse(node.value) for node in tree.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    assert calls[0] == "patches.require_written_for()" and all(call.startswith("events.") for call in calls[1:]), calls


def test_every_file_of_the_client_reads_in_one_sitting():
    lengths = {path.name: len(path.read_text().splitlines()) for path in [*CLIENT.glob("*.py"), *SHIM.parent.glob("*.py")]}
    assert max(lengths.values()) <= 400, lengths
