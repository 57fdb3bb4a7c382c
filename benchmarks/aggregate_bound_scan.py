"""The aggregate rate's client bound (rig.load.client_error, output_tok_s) against the simulated
clients of tests/load/client_error/client_sim.py, over many seeds: how many runs put the truth outside
the bound (misses), the runs nearest to it (error / bound), and the median bound and error; for
the figure's bound and for each of its two rules alone (every user's shift traded at both edges;
the shifts' move across a steady window, pooled over the processes), so that neither rests on the
other to hold.

    python benchmarks/aggregate_bound_scan.py --seeds 50 --at-scale 3   # ~1000 runs, ~12 minutes on one core
    python benchmarks/aggregate_bound_scan.py --at-scale 20 --family "at scale: distributed spawn"   # one family

Seeds 1000+ of the closed-loop profiles (quiet, busy, stalled, starved, frozen) at 4, 16 and 48
users, and seeds 500+ of the engine-like steps (as is, chunks spread over 1.5 ms, a monitor locked
onto the steps' quiet part): held out from the tests' own seeds. At scale (--at-scale seeds, 2000+):
engine steps of 50 ms at 16, 100 and 300 users a process (a pass of 300 reads takes 18 ms, as at
250 streams a process on the H200), 4 x 50 and 12 x 100 users over several processes on the same
step clock, closed loops of 8-300 users under the busy to frozen profiles, and 60-300 users
spawned in Locust's batches with 1-4 stalls of 0.2-1 s during the spawn (records without the
rounds; and with them, the loop busy besides: the local runner's records), and 60-300 users of a
distributed run's worker (the master paces the batches, each loop with its own stalls, the
worker's at every batch too; the records carry each user's dispatch); each run closes its
window with the run, as c3000 does. Arrival schedules (--open-loop seeds, 3000+): Poisson arrivals
taken by a pool of users, from one that keeps up to one that queues, under every profile (their
window closes at the last scheduled arrival; only the edges' rule reads them). Prints figures;
asserts nothing."""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "load" / "client_error")]

import client_sim as simulation  # noqa: E402
import engine_sim  # noqa: E402

from rig.load import client_error  # noqa: E402
from rig.load.client_error import UNBOUNDED, client_bounds  # noqa: E402
from rig.load.metrics import summarize  # noqa: E402
from rig.load.records import RequestRecord  # noqa: E402
from rig.load.summary import Window  # noqa: E402
from rig.load.wire import ClientStats  # noqa: E402

ENGINE_CASES = ({}, {"spread": 0.0015}, {"first_due": 0.0055, "gaps": (0.01, 0.01)})
AT_SCALE_ENGINE = ({}, {"spread": 0.0015, "send_cost": 600e-6}, {"first_due": 0.0055, "gaps": (0.01, 0.01)})
RULES = ("the figure's", "by edges alone", "at steady state alone")
START = simulation.START
AGGREGATE = "output_tok_s"


def bounds_by_rule(records: list[RequestRecord], window: Window, clients: list[ClientStats],
                   master: ClientStats | None = None) -> dict[str, float | None]:
    """The aggregate's bound as rig reports it, and each rule's alone (None: the rule gives none);
    `master`: a distributed run's master."""
    out: dict[str, float | None] = {}
    per_process, pooled = client_error.BOUNDS[AGGREGATE], client_error.POOLED[AGGREGATE]
    try:
        out[RULES[0]] = client_bounds(records, window, clients, 0.01, master)[AGGREGATE].bound
        del client_error.POOLED[AGGREGATE]
        out[RULES[1]] = client_bounds(records, window, clients, 0.01, master)[AGGREGATE].bound
        client_error.POOLED[AGGREGATE] = pooled
        client_error.BOUNDS[AGGREGATE] = lambda inputs: client_error.Bound(UNBOUNDED)
        alone = client_bounds(records, window, clients, 0.01, master)[AGGREGATE].bound
        out[RULES[2]] = None if alone is None or alone >= UNBOUNDED else alone
    finally:
        client_error.BOUNDS[AGGREGATE], client_error.POOLED[AGGREGATE] = per_process, pooled
    return out


def error_of(records: list[RequestRecord], ideal: list[RequestRecord], window: Window) -> float:
    return abs(summarize(ideal, window).output_tok_s / summarize(records, window).output_tok_s - 1)


def closing_window(start: float, end: float, run_start: float = START) -> Window:
    return Window(start=start, end=end, run_start=run_start, run_end=end, steady=True, opened_by="simulated: closes with the run")


def as_process(records: list[RequestRecord], process: str) -> list[RequestRecord]:
    return [r.model_copy(update={"process": process, "user": f"{process}-{r.user}", "id": f"{process}-{r.id}"}) for r in records]


def engine_at_scale(seed: int, processes: int, users: int, seconds: float = 25.0, **options: float) -> tuple[float, dict]:
    """`processes` client processes of `users` each against one engine's step clock."""
    records, ideal, clients = [], [], []
    for j in range(processes):
        read, _, lag = engine_sim.engine_run(random.Random(seed * 100 + j), users=users, seconds=seconds, step=0.05, tokens=64,
                                             **options)
        records += as_process(read, f"p{j}")
        ideal += as_process(engine_sim.engine_run(None, users=users, seconds=seconds, step=0.05, tokens=64, **options)[0], f"p{j}")
        clients.append(ClientStats(process=f"p{j}", lag=lag))
    window = closing_window(START + 5.0, START + seconds)
    records, ideal = simulation.cut_at(records, window.end), simulation.cut_at(ideal, window.end)
    return error_of(records, ideal, window), bounds_by_rule(records, window, clients)


def loop_at_scale(seed: int, profile: str, users: int, seconds: float = 30.0) -> tuple[float, dict]:
    rate, longest, stalls = simulation.PROFILES[profile]
    loop = simulation.busy_loop(random.Random(seed), seconds + 5, rate, longest, stalls)
    window = closing_window(START + 4.0, START + seconds)
    records = simulation.cut_at(simulation.closed_loop(loop, users, seconds, 64, 0.2, 0.02)[0], window.end)
    ideal = simulation.cut_at(simulation.closed_loop(None, users, seconds, 64, 0.2, 0.02)[0], window.end)
    return error_of(records, ideal, window), bounds_by_rule(records, window, [ClientStats(process="p", lag=simulation.monitor(loop, seconds + 2))])


def spawn_at_scale(seed: int, users: int, stalls: int, seconds: float = 25.0, rate: float = 100.5,
                   rounds: bool = False) -> tuple[float, dict]:
    """Locust's local runner: batches with stalls during the spawn; the window opens a request's
    lifetime after it. `rounds`: the records say which round started each user, as the locustfile's
    record_local_rounds writes them, and the loop is busy besides (stretches under the monitor's period,
    30 a second), so the pace's wake-ups come late by what no long stretch shows."""
    rng = random.Random(seed)
    spans = [(rng.uniform(0.1, users / rate), rng.uniform(0.2, 1.0)) for _ in range(stalls)]
    if rounds:
        t = 0.0
        while t < 200.0:
            t += rng.expovariate(30.0)
            spans.append((t, rng.uniform(0.0, 0.0095)))
    loop = simulation.stalls_at(spans, 200.0)
    dispatched, starts, spawned = simulation.distributed_batches(loop, loop, users, rate)
    ideal_starts, _ = simulation.locust_batches(None, users, rate)
    tokens, ttft, itl, end = 64, 0.2, 0.05, spawned + seconds
    window = closing_window(START + spawned + ttft + tokens * itl + 0.5, START + end, START + spawned)
    records = simulation.cut_at(simulation.spawned_users(loop, starts, end + 1, tokens, ttft, itl, 1, 0.05,
                                                         dispatched if rounds else None), window.end)
    ideal = simulation.cut_at(simulation.spawned_users(None, ideal_starts, end + 1, tokens, ttft, itl, 1, 0.05), window.end)
    return error_of(records, ideal, window), bounds_by_rule(records, window, [ClientStats(process="p", lag=simulation.monitor(loop, end + 1))])


def distributed_spawn_at_scale(seed: int, users: int, stalls: int, seconds: float = 25.0, rate: float = 100.5) -> tuple[float, dict]:
    """A distributed run's spawn: the master paces the batches, a worker spawns each when its loop is
    free, each loop with its own stalls (the worker's at every batch: the spawn's own work); the
    records carry each user's dispatch, as the locustfile's do."""
    rng = random.Random(seed)
    span = users / rate
    master = simulation.stalls_at([(rng.uniform(0.1, span), rng.uniform(0.05, 1.0)) for _ in range(rng.randint(0, stalls))], 200.0)
    worker = simulation.stalls_at([(k * int(rate) / rate, rng.uniform(0.02, 0.15)) for k in range(int(span) + 1)]
                                  + [(rng.uniform(0.1, span), rng.uniform(0.2, 1.2)) for _ in range(stalls)], 200.0)
    dispatched, starts, spawned = simulation.distributed_batches(master, worker, users, rate)
    _, ideal_starts, _ = simulation.distributed_batches(None, None, users, rate)
    tokens, ttft, itl, end = 64, 0.2, 0.05, spawned + seconds
    window = closing_window(START + spawned + ttft + tokens * itl + 0.5, START + end, START + spawned)
    records = simulation.cut_at(simulation.spawned_users(worker, starts, end + 1, tokens, ttft, itl, 1, 0.05, dispatched), window.end)
    ideal = simulation.cut_at(simulation.spawned_users(None, ideal_starts, end + 1, tokens, ttft, itl, 1, 0.05), window.end)
    clients = [ClientStats(process="p", lag=simulation.monitor(worker, end + 1))]
    return error_of(records, ideal, window), bounds_by_rule(records, window, clients,
                                                            ClientStats(process="master", lag=simulation.monitor(master, end + 1)))


OPEN_LOOP_SHAPES = (  # (pool, rate, tokens, ttft, itl): a pool that keeps up, one that queues, long and short requests
    (64, 8.0, 64, 0.2, 0.02), (16, 8.0, 64, 0.2, 0.02), (8, 4.0, 64, 0.2, 0.02), (4, 6.0, 64, 0.2, 0.02),
    (256, 60.0, 16, 0.05, 0.01), (32, 20.0, 8, 0.02, 0.005), (128, 10.0, 200, 0.3, 0.03), (6, 12.0, 16, 0.05, 0.01))


def open_loop_run(seed: int, profile: str, shape: tuple[int, float, int, float, float], seconds: float = 25.0) -> tuple[float, dict]:
    """An arrival schedule (ArrivalUser), read by a loop of `profile`, against the ideal client's run."""
    pool, rate, tokens, ttft, itl = shape
    loop = simulation.busy_loop(random.Random(seed), seconds + 10, *simulation.PROFILES[profile])
    records, scheduled = simulation.open_loop(loop, pool, rate, seconds, tokens, ttft, itl, seed)
    ideal, _ = simulation.open_loop(None, pool, rate, seconds, tokens, ttft, itl, seed)
    window = Window(start=START + 2.0, end=START + scheduled[-1], run_start=START, run_end=START + seconds + 5, steady=True,
                    opened_by="simulated: the last scheduled arrival")
    return error_of(records, ideal, window), bounds_by_rule(records, window, [ClientStats(process="p", lag=simulation.monitor(loop, seconds + 8))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--at-scale", type=int, default=3, help="seeds of the at-scale cases (~25 runs a seed, ~5 s a run)")
    parser.add_argument("--open-loop", type=int, default=5, help="seeds of the arrival schedules (40 runs a seed, ~0.3 s a run)")
    parser.add_argument("--family", help="only the at-scale and open-loop cases whose name begins so, e.g. 'at scale: distributed spawn'")
    args = parser.parse_args()
    if args.family:
        args.seeds = 0
    runs: list[tuple[str, float, dict[str, float | None]]] = []  # (case, error, bound by rule)
    original_bounds = client_error.client_bounds

    def through_rules(records: list[RequestRecord], window: Window, clients: list[ClientStats], limit: float) -> dict:
        found = bounds_by_rule(records, window, clients)
        captured.append(found)
        return original_bounds(records, window, clients, limit)

    captured: list[dict[str, float | None]] = []
    simulation.client_bounds = engine_sim.client_bounds = through_rules  # the tests' trials, each rule's bound captured
    try:
        for profile, users, seed in itertools.product(simulation.PROFILES, (4, 16, 48), range(args.seeds)):
            for name, error, _, _ in simulation.trial(1000 + seed, profile, users):
                if name == AGGREGATE:
                    runs.append((f"{profile}, {users} users, seed {1000 + seed}", error, captured[-1]))
        for seed, case in itertools.product(range(args.seeds), ENGINE_CASES):
            for name, error, _ in engine_sim.engine_trial(500 + seed, **case):
                if name == AGGREGATE:
                    runs.append((f"engine {case or 'as is'}, seed {500 + seed}", error, captured[-1]))
    finally:
        simulation.client_bounds = engine_sim.client_bounds = original_bounds
    at_scale: list[tuple[str, Callable[[], tuple[float, dict]]]] = []
    for seed in range(2000, 2000 + args.at_scale):
        for users, options in itertools.product((16, 100, 300), AT_SCALE_ENGINE):
            at_scale.append((f"at scale: engine, {users} users, {options or 'as is'}, seed {seed}",
                             lambda s=seed, u=users, o=options: engine_at_scale(s, 1, u, **o)))
        for processes, users in ((4, 50), (12, 100)):
            at_scale.append((f"at scale: engine, {processes} x {users} users, seed {seed}",
                             lambda s=seed, p=processes, u=users: engine_at_scale(s, p, u, send_cost=600e-6)))
        for profile, users in itertools.product(("busy", "stalled", "starved", "frozen"), (8, 64, 300)):
            at_scale.append((f"at scale: {profile}, {users} users, seed {seed}", lambda s=seed, p=profile, u=users: loop_at_scale(s, p, u)))
        for users, stalls in ((60, 1), (300, 2), (300, 4)):
            at_scale.append((f"at scale: spawn, {users} users, {stalls} stalls, seed {seed}",
                             lambda s=seed, u=users, n=stalls: spawn_at_scale(s, u, n)))
        for users, stalls in ((60, 0), (60, 1), (300, 0), (300, 2)):
            at_scale.append((f"at scale: local spawn, rounds recorded, {users} users, {stalls} stalls, seed {seed}",
                             lambda s=seed, u=users, n=stalls: spawn_at_scale(s, u, n, rounds=True)))
        for users, stalls in ((60, 0), (60, 1), (300, 0), (300, 2), (300, 4)):
            at_scale.append((f"at scale: distributed spawn, {users} users, up to {stalls} stalls, seed {seed}",
                             lambda s=seed, u=users, n=stalls: distributed_spawn_at_scale(s, u, n)))
    for seed, profile, shape in itertools.product(range(3000, 3000 + args.open_loop), simulation.PROFILES, OPEN_LOOP_SHAPES):
        at_scale.append((f"open loop: {profile}, pool {shape[0]} at {shape[1]:g}/s, {shape[2]} tokens, seed {seed}",
                         lambda s=seed, p=profile, o=shape: open_loop_run(s, p, o)))
    for case, run in at_scale:
        if args.family and not case.startswith(args.family):
            continue
        error, found = run()
        runs.append((case, error, found))
    print(f"{len(runs)} runs ({len(at_scale)} at scale)")
    for rule in RULES:
        bounded = sorted(((error / found[rule] if found[rule] else float("inf"), error, found[rule], case)
                          for case, error, found in runs if found[rule] is not None), reverse=True)
        median = f"median bound {100 * statistics.median(b[2] for b in bounded):.2f}%" if bounded else "no bound"
        print(f"{rule} bound: {len(bounded)} runs bounded, {sum(1 for b in bounded if b[0] > 1)} with the truth outside it, {median}")
        for ratio, error, bound, case in bounded[:3]:
            print(f"  error/bound {ratio:.2f}: error {100 * error:.3f}%, bound {100 * bound:.3f}% ({case})")
    for family in ("open loop", "at scale: engine, 300", "at scale: engine, 12 x", "at scale: spawn, 300", "at scale: local spawn, rounds recorded, 300",
                   "at scale: distributed spawn, 300",
                   "at scale: frozen, 300"):
        chosen = [(error, found) for case, error, found in runs if case.startswith(family)]
        if chosen:
            print(f"{family}...: median error {100 * statistics.median(e for e, _ in chosen):.3f}%, median bound "
                  + ", ".join(f"{rule} {100 * statistics.median(f[rule] for _, f in chosen if f[rule] is not None):.2f}%"
                              for rule in RULES if any(f[rule] is not None for _, f in chosen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
