"""An engine that writes one chunk to every running stream at each step, read by a client whose event
loop works in passes (docs/client-error.md, R3): the simulation of the loop-pass waits. Pure
arithmetic: no clock."""

from __future__ import annotations

import heapq
import math
import random
from typing import Any

from client_sim import FIGURES, START

from rig.load.client_error import client_bounds
from rig.load.metrics import summarize
from rig.load.records import RequestRecord
from rig.load.summary import Window
from rig.load.wire import ClientStats


def engine_run(rng: random.Random | None, users: int = 32, seconds: float = 12.0, step: float = 0.01, tokens: int = 48,
               prefill_steps: int = 2, cost: float = 60e-6, spread: float = 0.0, send_cost: float = 0.0,
               gaps: tuple[float, float] = (0.005, 0.01), first_due: float | None = None,
               waits: str | None = "since_idle") -> tuple[list[RequestRecord], list[RequestRecord], list[tuple[float, float]]]:
    """Closed-loop users against an engine that writes one chunk to every running request at each step
    (over `spread` seconds, in a random order), and one client process whose event loop works in passes:
    a pass begins when the loop comes back from waiting for the network (20-60 us after the first
    thing became ready, or at once when the last pass ran past it), reads everything ready then in a
    random order at `cost` each, and then runs, before its next wait, the next request of every user
    whose request ended (`send_cost` each, as Locust's next task runs from gevent's callback queue).
    Bytes that arrive meanwhile are read in the next pass. The lag monitor is a kernel timer due
    every `gaps` (drawn; (0.01, 0.01) with `first_due` between two steps: a fixed period locked onto
    the engine's quiet part). Each read's wait (RequestRecord.chunk_waits_us), by `waits`:
    "since_idle" as the locustfile takes it (from its pass's start when the loop waited for it, else
    from the previous pass's start), "pass" (from its pass's start only), None (not recorded).
    `rng` None: an ideal client (no wake-up, no cost): the truth. Returns the records as read, the
    same requests at the server's times (sent when they really were), and the monitor's samples."""
    ideal = rng is None
    draw = rng or random.Random(0)
    next_send = {user: 0.001 * user for user in range(users)}
    running: dict[int, list] = {}  # user -> [sent, admitted step, true times, read times, waits]
    arrivals: list[tuple[float, int]] = []  # a heap of (written, user)
    records, exact, lag = [], [], []
    count_of = {user: 0 for user in range(users)}
    busy_until, previous_start = 0.0, 0.0
    monitor_due = first_due if first_due is not None else draw.uniform(*gaps)

    def emit(k: int) -> None:
        now = k * step
        for user, sent in list(next_send.items()):  # admitted at the first step at or after the request reached the engine
            if sent <= now:
                running[user] = [sent, k, [], [], []]
                del next_send[user]
        ready = [user for user, state in running.items() if k >= state[1] + prefill_steps]
        draw.shuffle(ready)
        for place, user in enumerate(ready):
            heapq.heappush(arrivals, (now + (0.0 if ideal else spread * place / len(ready)), user))

    k = 0
    emit(k)
    while k * step < seconds:
        while True:  # the loop's passes until the engine's next step
            ready_at = min(arrivals[0][0] if arrivals else math.inf, math.inf if ideal else monitor_due)
            if ready_at >= (k + 1) * step:
                break
            waited = ready_at > busy_until  # the loop was idle: it waited for what made this pass
            start = ready_at + (0.0 if ideal else draw.uniform(20e-6, 60e-6)) if waited else busy_until
            since = start if waits == "pass" or waited else previous_start
            items = []
            while arrivals and arrivals[0][0] <= start:
                items.append(heapq.heappop(arrivals))
            if not ideal and monitor_due <= start:
                items.insert(draw.randrange(len(items) + 1), (monitor_due, -1))
            t, ended = start, []
            for written, user in items:
                if user < 0:  # the monitor's timer
                    lag.append((START + t, t - written))
                    monitor_due = t + draw.uniform(*gaps)
                    continue
                t += 0.0 if ideal else cost
                state = running[user]
                state[2].append(written)
                state[3].append(t)
                state[4].append(t - since)
                if len(state[2]) == tokens:
                    ended.append(user)
            for user in ended:  # the next request, before the loop waits again
                sent, _, true, seen, read_waits = running.pop(user)
                name = f"{user}-{count_of[user]}"
                count_of[user] += 1
                for kind, times in (("seen", seen), ("true", true)):
                    record = RequestRecord(id=f"p-{name}", process="p", user=f"u{user}", prompt="p0", t_send=START + sent,
                                           status=200, t_first=START + times[0], t_last=START + times[-1],
                                           t_end=START + times[-1], chunks=[START + x for x in times],
                                           chunk_waits_us=[round(1e6 * w) for w in read_waits] if kind == "seen" and waits else None,
                                           usage={"completion_tokens": tokens, "prompt_tokens": 64}, finish_reason="length",
                                           prompt_tokens_target=64, prompt_nonce=f"n{name}")
                    (records if kind == "seen" else exact).append(record)
                t += 0.0 if ideal else send_cost
                next_send[user] = t  # sent at the end of its construction: when rig stamps t_send
            previous_start, busy_until = start, t
        k += 1
        emit(k)
    return records, exact, lag


def engine_trial(seed: int, **options: Any) -> list[tuple[str, float, float | None]]:
    seconds = 12.0
    window = Window(start=START + 3.0, end=START + seconds - 1.0, run_start=START, run_end=START + seconds, steady=True,
                    opened_by="simulated")
    records, exact, lag = engine_run(random.Random(seed), seconds=seconds, **options)
    measured, truth = summarize(records, window), summarize(exact, window)
    truth.output_tok_s = summarize(engine_run(None, seconds=seconds, **options)[0], window).output_tok_s
    bounds = client_bounds(records, window, [ClientStats(process="p", lag=lag)], limit=0.01)
    return [(name, abs(read(truth) / read(measured) - 1), bounds[name].bound) for name, read in FIGURES.items()]


LOCKED = {"gaps": (0.01, 0.01), "first_due": 0.0065}


ENGINE_CASES = {  # what the client meets: a step's chunks at once, or written over 1.5 ms with 0.6 ms to send each next request
    "burst": {},
    "burst, locked monitor": LOCKED,
    "spread, sends": {"spread": 1.5e-3, "send_cost": 600e-6},
    "spread, sends, locked monitor": {"spread": 1.5e-3, "send_cost": 600e-6, **LOCKED},
}


def misses(case: dict, waits: str | None, seeds: range = range(5)) -> list[tuple[int, str, float, float | None]]:
    return [(seed, name, round(100 * error, 3), bound and round(100 * bound, 3)) for seed in seeds
            for name, error, bound in engine_trial(seed, waits=waits, **case) if bound is None or error > bound]
