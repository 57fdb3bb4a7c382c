"""Every client bound (total and parts) of the committed evidence runs and of fixed simulated runs,
as rig.load.client_error computes them: golden_bounds.json holds them, and test_golden_bounds.py
holds the code to them. Regenerate (only where a rule changes a bound, on purpose):

    python tests/load/client_error/golden_bounds.py
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(HERE), str(REPO)]

import client_sim as sim  # noqa: E402
import engine_sim  # noqa: E402

from rig.load import client_error  # noqa: E402
from rig.load.metrics import responsive_end, steady_window  # noqa: E402
from rig.load.records import RequestRecord, read_records  # noqa: E402
from rig.load.scenarios import load_scenario  # noqa: E402
from rig.load.summary import RunSummary, Window  # noqa: E402
from rig.load.wire import ClientStats  # noqa: E402
from rig.loadrun.writeup import read_clients, read_dispatcher, read_window_events  # noqa: E402
from rig.validation.evidence import unpack  # noqa: E402

GOLDEN = HERE / "golden_bounds.json"
# The committed load runs whose raw records rig's validation recomputes (validation/<claim>/*.tar.xz).
EVIDENCE_RUNS = ("sglang-bundle-c1/run.tar.xz", "vllm-bundle-fa3-c1/fa3-run.tar.xz", "vllm-bundle-fa3-c1/triton-run.tar.xz",
                 "vllm-c3000-frontends4/first-run.tar.xz", "vllm-c3000-frontends4/second-run.tar.xz")
LARGE_RUNS = {"vllm-c3000-frontends4/first-run.tar.xz", "vllm-c3000-frontends4/second-run.tar.xz"}  # 3000 users: ~30 s each
RELATIVE = 1e-12


@dataclass(frozen=True)
class Source:
    """What client_bounds reads: the records, the window, each process's lag samples, the master's."""

    records: list[RequestRecord]
    window: Window
    clients: list[ClientStats]
    dispatcher: ClientStats | None = None
    pause_s: float = 0.0


def evidence_run(archive: str, scratch: Path) -> Source:
    """A run as rig.validation.runs.LoadRunKind reads it: the steady window from the run's events."""
    directory = scratch / archive.replace("/", "-")
    directory.mkdir(parents=True, exist_ok=True)
    unpack(REPO / "validation" / archive, directory, f"validation/{archive}")
    stored = RunSummary.read(directory)
    scenario = load_scenario(stored.scenario.name)
    records, clients = read_records(directory), read_clients(directory)
    events = read_window_events(directory)
    if "stopping" in events:
        events["stopping"] = responsive_end(clients, events["stopping"])
    window = steady_window(records, events, scenario.ramp_s, stored.scenario.users)
    think_s = scenario.conversation.think_time_s if scenario.conversation else 0.0
    return Source(records, window, clients, read_dispatcher(directory), think_s)


def simulated_runs() -> Iterator[tuple[str, Source]]:
    """One run of each simulation family (client_sim), fixed draws."""
    start = sim.START
    for profile in sorted(sim.PROFILES):
        for users in (1, 8):
            rate, longest, stalls = sim.PROFILES[profile]
            loop = sim.busy_loop(random.Random(0), 19.0, rate, longest, stalls)
            window = Window(start=start + 3.0, end=start + 14.0, run_start=start, run_end=start + 16.0, steady=True,
                            opened_by="simulated")
            records, _ = sim.closed_loop(loop, users, 16.0, 64, 0.2, 0.02)
            yield f"closed loop, {profile}, {users} users", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, 16.0))])
    loop = sim.busy_loop(random.Random(1), 19.0, *sim.PROFILES["stalled"])
    window = Window(start=start + 3.0, end=start + 14.0, run_start=start, run_end=start + 14.0, steady=False, opened_by="simulated")
    records = sim.cut_at(sim.closed_loop(loop, 48, 14.0, 300, 0.3, 0.03, 4)[0], start + 14.0)
    yield "cut streams, 4 tokens a chunk", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, 16.0))])
    master, worker = sim.stalls_at([(1.5, 0.6)], 80.0), sim.stalls_at([(k / 20.5 * 20, 0.09) for k in range(6)] + [(3.2, 0.4)], 80.0)
    dispatched, starts, spawned = sim.distributed_batches(master, worker, 120, 20.5)
    end = spawned + 12.0
    window = Window(start=start + spawned, end=start + end, run_start=start + spawned, run_end=start + end, steady=False,
                    opened_by="simulated")
    records = sim.cut_at(sim.spawned_users(worker, starts, end + 1, 300, 1.5, 0.03, 4, 0.05, dispatched), start + end)
    clients = [ClientStats(process="p", lag=sim.monitor(worker, end + 1))]
    yield "distributed spawn, rounds recorded", Source(records, window, clients, ClientStats(process="master", lag=sim.monitor(master, end + 1)))
    undated = [r.model_copy(update={"t_dispatched": None, "dispatch_behind": None, "opening": None}) for r in records]
    yield "distributed spawn, rounds not recorded", Source(undated, window, clients, ClientStats(process="master", lag=sim.monitor(master, end + 1)))
    loop = sim.stalls_at([(0.7, 0.6), (2.1, 0.9)], 200.0)
    starts, spawned = sim.locust_batches(loop, 300, 100.5)
    end = spawned + 25.0
    records = sim.cut_at(sim.spawned_users(loop, starts, end + 1, 64, 0.2, 0.05, 1, 0.05), start + end)
    for steady in (True, False):
        window = Window(start=start + spawned + 0.2 + 64 * 0.05 + 0.5, end=start + end, run_start=start + spawned, run_end=start + end,
                        steady=steady, opened_by="simulated")
        yield f"300 users spawned in batches, steady {steady}", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, end + 1))])
    loop = sim.busy_loop(random.Random(5), 35.0, *sim.PROFILES["quiet"][:2], 0)
    window = Window(start=start + 6.0, end=start + 28.0, run_start=start, run_end=start + 30.0, steady=True, opened_by="simulated")
    records = sim.conversations(loop, 16, 30.0, 32, 0.2, 0.02, 4, 2.0)
    yield "conversations, 2 s think time", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, 32.0))], pause_s=2.0)
    loop = sim.busy_loop(random.Random(0), 40.0, *sim.PROFILES["starved"])
    records, scheduled = sim.open_loop(loop, 8, 4.0, 30.0, 64, 0.2, 0.02, 0)
    window = Window(start=start + 2.0, end=start + scheduled[-1], run_start=start, run_end=start + 35.0, steady=True, opened_by="simulated")
    yield "open loop, starved", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, 38.0))])
    loop = sim.stalls_at([(scheduled[-1] - 0.001, 0.2)], 40.0)
    records, _ = sim.open_loop(loop, 256, 60.0, 25.0, 16, 0.05, 0.01, 0)
    drained = max(r.t_end for r in records if r.t_end is not None) - start
    window = Window(start=start, end=start + drained, run_start=start, run_end=start + drained, steady=True, opened_by="simulated")
    yield "open loop, drained window", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, 40.0))])
    cycle = 8.0 + 7 * 0.03
    end = 4 * cycle + 0.2
    loop = sim.stalls_at([(2 * cycle + 0.001, 0.67)], end + 30)
    records = sim.in_step_users(loop, 16, end, 8.0, 0.03, 8)
    window = steady_window(records, {"spawning_complete": start + 16 * 0.0005, "stopping": start + end}, 0.0, 16)
    yield "users in step", Source(records, window, [ClientStats(process="p", lag=sim.monitor(loop, end + 2))])
    for case in ("burst, locked monitor", "spread, sends"):
        records, _, lag = engine_sim.engine_run(random.Random(0), seconds=12.0, **engine_sim.ENGINE_CASES[case])
        window = Window(start=start + 3.0, end=start + 11.0, run_start=start, run_end=start + 12.0, steady=True, opened_by="simulated")
        yield f"engine steps, {case}", Source(records, window, [ClientStats(process="p", lag=lag)])


def parts(source: Source) -> dict[str, Any]:
    """Each figure's bound: the total client_bounds reports, each process's, the pooled one, and the
    aggregate's parts."""
    inputs = client_error.figure_inputs(source.records, source.window, source.clients, source.dispatcher, source.pause_s)
    bounds = client_error.judged_bounds(inputs, 0.01)  # what client_bounds reports, from the same inputs
    out: dict[str, Any] = {}
    for name, bound_of in client_error.BOUNDS.items():
        pooled = client_error.POOLED.get(name)
        assert client_error.bound(name, inputs).total == bounds[name].bound
        out[name] = {"total": bounds[name].bound,
                     "per_process": {str(i.profile.process): bound_of(i).total for i in inputs if i.profile.samples_s},
                     "pooled": pooled(inputs).total if pooled is not None and client_error.monitored(inputs) else None}
    out["output_tok_s parts"] = {str(i.profile.process): None if i.aggregate is None else
                                 {"tokens": i.aggregate.tokens, "by_edges": i.aggregate.by_edges_share,
                                  "between": i.aggregate.between_share}
                                 for i in inputs if i.profile.samples_s}
    return out


def compute(large: bool = True) -> dict[str, Any]:
    import tempfile

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="golden-bounds-") as scratch:
        for archive in EVIDENCE_RUNS:
            if large or archive not in LARGE_RUNS:
                out[f"validation/{archive}"] = parts(evidence_run(archive, Path(scratch)))
    for name, source in simulated_runs():
        out[f"simulated: {name}"] = parts(source)
    return out


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN.relative_to(REPO)}")
