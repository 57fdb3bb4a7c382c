"""A simulated event loop whose every delay is known, for the client-error tests (docs/client-error.md):
blocked stretches (a competing process's time slices, collections, stalls of hundreds of
milliseconds), the lag monitor as Locust runs it (a 10 ms timer that wakes late by the stretch it
lands in), and closed-loop, spawned, conversation and arrival-driven users whose chunk arrivals are
recorded late by the stretch they land in. The same users against the same server with an ideal
client give the truth. Pure arithmetic: no clock."""

from __future__ import annotations

import bisect
import heapq
import random
from dataclasses import dataclass

import numpy as np

from rig.load.client_error import client_bounds
from rig.load.metrics import summarize
from rig.load.records import RequestRecord
from rig.load.summary import Metrics, Window
from rig.load.wire import ClientStats, dispatch_wait, dispatched_at

PERIOD = 0.01  # the locustfile's lag monitor


START = 1_700_000_000.0


@dataclass(frozen=True)
class Loop:
    """Blocked stretches of one client process: [start, end) in seconds from START."""

    starts: list[float]
    ends: list[float]

    def delay(self, t: float) -> float:
        """How late an event that became ready at t is read: the rest of the stretch it lands in."""
        i = bisect.bisect_right(self.starts, t) - 1
        return max(self.ends[i] - t, 0.0) if i >= 0 else 0.0


def busy_loop(rng: random.Random, seconds: float, rate: float, longest: float, stalls: int) -> Loop:
    """Stretches at `rate` per second of up to `longest` (time slices lost to other work), and
    `stalls` stretches of 50-300 ms (a collection, a descheduled process)."""
    spans, t = [], 0.0
    while t < seconds:
        t += rng.expovariate(rate)
        spans.append((t, t + rng.uniform(0, longest)))
    for _ in range(stalls):
        at = rng.uniform(1.0, seconds - 1.0)
        spans.append((at, at + rng.uniform(0.05, 0.3)))
    spans.sort()
    starts, ends, reach = [], [], 0.0
    for a, b in spans:  # overlapping stretches are one
        if starts and a <= reach:
            reach = max(reach, b)
            ends[-1] = reach
        else:
            starts.append(a)
            ends.append(b)
            reach = b
    return Loop(starts, ends)


def monitor(loop: Loop, seconds: float) -> list[tuple[float, float]]:
    """The lag monitor: sleep PERIOD, record how late it woke."""
    samples, t = [], 0.0
    while t < seconds:
        due = t + PERIOD
        late = loop.delay(due)
        samples.append((START + due + late, late))
        t = due + late
    return samples


def server_times(user: int, k: int, tokens: int, ttft: float, itl: float) -> tuple[float, list[float]]:
    """Request k of a user: its TTFT and ITLs, the same whichever client sends it."""
    rng = random.Random(user * 100_003 + k)
    return ttft * rng.uniform(0.7, 1.3), [itl * rng.uniform(0.8, 1.2) for _ in range(tokens - 1)]


def request_times(loop: Loop | None, user: int, k: int, sent: float, tokens: int, ttft: float,
                  itl: float) -> tuple[list[float], list[float]]:
    """Request k of a user sent at `sent`: its chunks' true times, and as the loop read them (late by
    the stretch each lands in, in order: one greenlet reads its stream)."""
    first, gaps = server_times(user, k, tokens, ttft, itl)
    true = [sent + first]
    for gap in gaps:
        true.append(true[-1] + gap)
    return true, list(np.maximum.accumulate([t + (loop.delay(t) if loop else 0.0) for t in true]))


def record(user: int, k: int, sent: float, times: list[float], tokens: int, per_chunk: int = 1) -> RequestRecord:
    """`per_chunk` > 1: the server sends that many tokens a chunk and says so (continuous usage), as
    vLLM does when its output processing coalesces a loaded engine's steps."""
    return RequestRecord(id=f"p-{user}-{k}", process="p", user=f"u{user}", prompt="p0", t_send=START + sent,
                         status=200, t_first=START + times[0], t_last=START + times[-1], t_end=START + times[-1],
                         chunks=[START + t for t in times], usage={"completion_tokens": tokens * per_chunk, "prompt_tokens": 64},
                         chunk_tokens=[per_chunk] * len(times) if per_chunk > 1 else None,
                         finish_reason="length", prompt_tokens_target=64, prompt_nonce=f"n{user}-{k}", max_tokens=tokens * per_chunk)


def closed_loop(loop: Loop | None, users: int, seconds: float, tokens: int, ttft: float,
                itl: float, per_chunk: int = 1) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """Closed-loop users: the records as the client read them, and the same requests at the times
    they happened. `loop` None: an ideal client (every time read exactly when it happens)."""
    records, exact = [], []
    for user in range(users):
        sent, k = 0.01 * user, 0
        while sent < seconds:
            true, seen = request_times(loop, user, k, sent, tokens, ttft, itl)
            records.append(record(user, k, sent, seen, tokens, per_chunk))
            exact.append(record(user, k, sent, true, tokens, per_chunk))
            sent, k = seen[-1], k + 1
    return records, exact


FIGURES = {
    "user_decode_tok_s": lambda m: m.user_decode_tok_s.token_weighted,
    "prefill_tok_s": lambda m: m.prefill_tok_s.token_weighted,
    "output_tok_s": lambda m: m.output_tok_s,
    "e2e_p50_ms": lambda m: m.e2e_s.p50,
    "ttft_p50_ms": lambda m: m.ttft_s.p50,
    "ttft_p99_ms": lambda m: m.ttft_s.p99,
    "itl_p50_ms": lambda m: m.itl_s.p50,
    "itl_p99_ms": lambda m: m.itl_s.p99,
    "tpot_p50_ms": lambda m: m.tpot_s.p50,
    "tpot_p99_ms": lambda m: m.tpot_s.p99,
    "e2e_p99_ms": lambda m: m.e2e_s.p99,
}


PROFILES = {  # (stretches per second, longest stretch, stalls): from a quiet client to a starved one
    "quiet": (20.0, 0.0005, 0),
    "busy": (60.0, 0.006, 0),
    "stalled": (60.0, 0.006, 3),
    "starved": (150.0, 0.012, 1),
    "frozen": (20.0, 0.0005, 8),  # a quiet loop stopped eight times (SIGSTOP, swapping)
}


def trial(seed: int, profile: str, users: int, tokens: int = 64, ttft: float = 0.2, itl: float = 0.02,
          seconds: float = 14.0, per_chunk: int = 1) -> list[tuple[str, float, float | None, bool]]:
    rng = random.Random(seed)
    rate, longest, stalls = PROFILES[profile]
    loop = busy_loop(rng, seconds + 5, rate, longest, stalls)
    window = Window(start=START + 3.0, end=START + seconds, run_start=START, run_end=START + seconds + 2, steady=True,
                    opened_by="simulated")
    records, exact = closed_loop(loop, users, seconds + 2, tokens, ttft, itl, per_chunk)
    measured: Metrics = summarize(records, window)
    # Per-request figures: the same requests at their true times. The aggregate: an ideal client's
    # own run, since a late client also sends later (it holds its users back).
    truth: Metrics = summarize(exact, window)
    truth.output_tok_s = summarize(closed_loop(None, users, seconds + 2, tokens, ttft, itl, per_chunk)[0], window).output_tok_s
    client = ClientStats(process="p", lag=monitor(loop, seconds + 2))
    bounds = client_bounds(records, window, [client], limit=0.01)
    out = []
    for name, read in FIGURES.items():
        error = abs(read(truth) / read(measured) - 1)  # a bound is a share of the reported figure
        out.append((name, error, bounds[name].bound, bounds[name].holds))
    return out


def cut_at(records: list[RequestRecord], at: float) -> list[RequestRecord]:
    """The run's end cuts every stream still running: its chunks after `at` never arrive."""
    out = []
    for r in records:
        if r.t_send > at:
            continue
        kept = [t for t in r.chunks if t <= at]
        if len(kept) == len(r.chunks):
            out.append(r)
            continue
        out.append(r.model_copy(update={"chunks": kept, "t_last": kept[-1] if kept else None, "t_first": kept[0] if kept else None,
                                        "t_end": at, "usage": None, "finish_reason": None, "error": "cut_by_window",
                                        "chunk_tokens": r.chunk_tokens[: len(kept)] if r.chunk_tokens else None,
                                        "chunk_waits_us": r.chunk_waits_us[: len(kept)] if r.chunk_waits_us else None}))
    return out


def stalls_at(times: list[float], seconds: float) -> Loop:
    """A quiet loop (0.2 ms stretches, 20 a second) stopped for each (start, length) in `times`."""
    rng = random.Random(3)
    spans, t = [(a, a + length) for a, length in times], 0.0
    while t < seconds:
        t += rng.expovariate(20.0)
        spans.append((t, t + 0.0002))
    spans.sort()
    starts, ends = [spans[0][0]], [spans[0][1]]
    for a, b in spans[1:]:
        if a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return Loop(starts, ends)


def spawned_users(loop: Loop | None, starts: list[float], seconds: float, tokens: int, ttft: float, itl: float,
                  per_chunk: int, connect: float, dispatched: list[tuple[float, float]] | None = None) -> list[RequestRecord]:
    """Closed-loop users as closed_loop, user i's first send at starts[i] plus its opening call
    (`connect` seconds: Locust's on_start GET), both read late by the loop like any read.
    `dispatched`: a distributed run's worker, whose users' first records say when the master sent
    their spawn message and how far behind its pace, and when their opening call began and was read,
    as the locustfile's do."""
    records = []
    for user, begin in enumerate(starts):
        sent, k = begin + connect, 0
        sent += loop.delay(sent) if loop else 0.0
        while sent < seconds:
            _, seen = request_times(loop, user, k, sent, tokens, ttft, itl)
            records.append(record(user, k, sent, seen, tokens, per_chunk))
            if k == 0 and dispatched is not None:
                records[-1] = records[-1].model_copy(update={"t_dispatched": START + dispatched[user][0],
                                                             "dispatch_behind": dispatched[user][1],
                                                             "opening": (START + begin, START + sent)})
            sent, k = seen[-1], k + 1
    return records


def locust_batches(loop: Loop | None, users: int, rate: float) -> tuple[list[float], float]:
    """Locust's UsersDispatcher: floor(rate) users, then a sleep of floor(rate)/rate s that a stall
    wakes late and nothing makes up: every later batch starts that much later. Returns the users'
    starts and when the last batch began (spawning_complete)."""
    per, wait = max(1, int(rate)), max(1, int(rate)) / rate
    starts, t = [], 0.0
    while len(starts) < users:
        starts += [t + 0.0005 * j for j in range(min(per, users - len(starts)))]
        if len(starts) < users:
            t += wait + (loop.delay(t + wait) if loop else 0.0)
    return starts, t


def distributed_batches(master: Loop | None, worker: Loop | None, users: int,
                        rate: float) -> tuple[list[tuple[float, float]], list[float], float]:
    """A distributed run's spawn: the master paces the batches on its own loop (locust_batches) and
    sends each to the worker, which spawns it once its loop is free: a worker's stall holds back the
    batch it meets, not the later ones. Returns each user's dispatch (the master's message, and how
    far behind the master's pace it was: round k due k waits after the first), its start on the
    worker, and when the last batch was sent (spawning_complete)."""
    per, wait = max(1, int(rate)), dispatch_wait(rate)
    dispatched: list[tuple[float, float]] = []
    starts: list[float] = []
    t, k = 0.0, 0
    while len(starts) < users:
        batch, begin = min(per, users - len(starts)), t + (worker.delay(t) if worker else 0.0)
        dispatched += [(t, t - k * wait)] * batch
        starts += [begin + 0.0005 * j for j in range(batch)]
        if len(starts) < users:
            t, k = t + wait + (master.delay(t + wait) if master else 0.0), k + 1
    return dispatched, starts, t


def paced_spawn(master_stalls: list[tuple[float, float]], worker_stalls: list[tuple[float, float]], users: int = 120,
                rate: float = 20.5, seconds: float = 12.0, connect: float = 0.05, master: Loop | None = None,
                ttft: float = 1.5, local: bool = False, closes_before_end: float = 0.0, tokens: int = 300,
                per_chunk: int = 4) -> tuple[float, float | None, float | None]:
    """One worker's users spawned by a master, each loop with its own stalls (`local`: Locust's local
    runner, one process whose loop, the master's, paces the rounds and spawns them); the window opens
    at spawning_complete and the run's end cuts the streams, as c3000's; it closes there, or
    `closes_before_end` s before it (what streams the end cut still had to bring then stays out of the
    bound: only the sends' hold-backs count). Returns the aggregate's error,
    its bound from the records as the locustfile writes them (each user's round), and the bound from
    the same records without the rounds (older records' rule: every stretch since the process began)."""
    itl = 0.03
    master = master or stalls_at(master_stalls, 80.0)
    worker = master if local else stalls_at(worker_stalls, 80.0)
    dispatched, starts, spawned = distributed_batches(master, worker, users, rate)
    _, ideal_starts, _ = distributed_batches(None, None, users, rate)
    end = spawned + seconds
    window = Window(start=START + spawned, end=START + end - closes_before_end, run_start=START + spawned, run_end=START + end, steady=False,
                    opened_by="simulated: spawning_complete")
    records = cut_at(spawned_users(worker, starts, end + 1, tokens, ttft, itl, per_chunk, connect, dispatched), START + end)
    truth = summarize(cut_at(spawned_users(None, ideal_starts, end + 1, tokens, ttft, itl, per_chunk, connect), START + end),
                      window).output_tok_s
    error = abs(truth / summarize(records, window).output_tok_s - 1)
    clients = [ClientStats(process="p", lag=monitor(worker, end + 1))]
    dispatcher = None if local else ClientStats(process="master", lag=monitor(master, end + 1))
    bound = client_bounds(records, window, clients, 0.01, dispatcher)["output_tok_s"].bound
    unrecorded = [r.model_copy(update={"t_dispatched": None, "dispatch_behind": None, "opening": None}) for r in records]
    return error, bound, client_bounds(unrecorded, window, clients, 0.01, dispatcher)["output_tok_s"].bound


def in_step_users(loop: Loop | None, users: int, seconds: float, ttft: float, itl: float, tokens: int) -> list[RequestRecord]:
    """Closed-loop users started together (0.5 ms apart) against a server whose every request takes the
    same time: their streams begin and end in step, as one batch of an engine's. Each sends its next
    request when it read the last one's end; the run's end cuts them at `seconds`."""
    records = []
    for user in range(users):
        sent, k = user * 0.0005, 0
        sent += loop.delay(sent) if loop else 0.0
        while sent < seconds:
            true = [sent + ttft + i * itl for i in range(tokens)]
            seen = list(np.maximum.accumulate([t + (loop.delay(t) if loop else 0.0) for t in true]))
            records.append(record(user, k, sent, seen, tokens))
            sent, k = seen[-1], k + 1
    return cut_at(records, START + seconds)


def local_first_sends(loop: Loop, users: int, rate: float, connect: float, answer: float) -> list[tuple[RequestRecord, float]]:
    """Locust's local runner, round by round: round 0 due at 0 and woken late like every round, each
    later one due a wait after the last woke; a user begins at its round, its opening call's connect
    completes `connect` s later and its answer comes `answer` s after that, each read late by the
    loop, and its first request goes out at once. Returns each user's first record as the locustfile
    writes it, and how much later than the ideal client's it was sent."""
    per, wait = max(1, int(rate)), dispatch_wait(rate)
    rounds: list[tuple[float, int]] = []
    due = 0.0
    while len(rounds) * per < users:
        woke = due + loop.delay(due)
        rounds.append((START + woke, min(users, (len(rounds) + 1) * per)))
        due = woke + wait
    out = []
    for user in range(users):
        begun = rounds[user // per][0] - START
        connected = begun + connect + loop.delay(begun + connect)
        sent = connected + answer + loop.delay(connected + answer)
        found = dispatched_at(rounds, user, wait)
        assert found is not None
        first = RequestRecord(id=f"p-{user}-0", process="p", user=f"u{user}", prompt="p0", t_send=START + sent,
                              t_dispatched=found[0], dispatch_behind=found[1], opening=(START + begun, START + sent))
        out.append((first, sent - (user // per * wait + connect + answer)))
    return out


def conversations(loop: Loop | None, users: int, seconds: float, tokens: int, ttft: float, itl: float, turns: int,
                  think: float) -> list[RequestRecord]:
    """ConversationUser: each user's turns one after another with `think` seconds between them (a sleep,
    woken late by the loop like any event), the next conversation at once after the last turn."""
    records = []
    for user in range(users):
        sent, k = 0.01 * user, 0
        while sent < seconds:
            _, seen = request_times(loop, user, k, sent, tokens, ttft, itl)
            conversation, turn = divmod(k, turns)
            records.append(record(user, k, sent, seen, tokens).model_copy(update={"conversation": f"u{user}-c{conversation}",
                                                                                  "turn": turn}))
            due = seen[-1] + (think if turn + 1 < turns else 0.0)
            sent, k = due + (loop.delay(due) if loop else 0.0), k + 1
    return records


def open_loop(loop: Loop | None, pool: int, rate: float, seconds: float, tokens: int, ttft: float, itl: float,
              seed: int) -> tuple[list[RequestRecord], list[float]]:
    """ArrivalUser: Poisson arrivals, each taken by the first user of the pool to be free (its last
    chunk read) and sent when the client wakes for it (late by the stretch that wake lands in); an
    arrival that finds every user busy waits for one (queued). `loop` None: the ideal client, which
    sends every arrival at its time. The server's times follow the arrival, whichever user sends it."""
    rng, scheduled, t = random.Random(seed), [], 0.0
    while (t := t + rng.expovariate(rate)) < seconds:
        scheduled.append(t)
    free = [(0.0, user) for user in range(pool)]  # (free from, user)
    records = []
    for index, at in enumerate(scheduled):
        ready, user = heapq.heappop(free)
        woke = max(at, ready)
        sent = woke + (loop.delay(woke) if loop else 0.0)
        _, seen = request_times(loop, index, 0, sent, tokens, ttft, itl)
        records.append(record(user, index, sent, seen, tokens).model_copy(
            update={"arrival": index, "t_scheduled": START + at, "queued": ready > at}))
        heapq.heappush(free, (seen[-1], user))
    return records, scheduled


