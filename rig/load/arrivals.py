"""An arrival-driven run (open loop, trace replay): its window, what its schedule asked for inside
it and what the client did, and why the client did not deliver the schedule."""

from __future__ import annotations

from statistics import median

import numpy as np

from rig.load.metrics import describe, window_of
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, e2e, run_tokens_per_chunk
from rig.load.summary import ArrivalStats, GapFit, Window

ARRIVAL_LATENESS_LIMIT_MS = 5.0  # arrivals that found a free user, sent later than this at p99: the schedule was not kept
QUEUED_LIMIT = 0.01  # an uncapped open loop whose arrivals waited for a free user more often: the pool was too small
UNSENT_LIMIT = 0.01  # arrivals of the window that were never sent


def arrival_window(records: list[RequestRecord], events: dict[str, float], last_offset: float, ramp_s: float,
                   replay: bool) -> Window:
    """The window of an arrival-driven run. A trace replay is measured whole, from its start to the
    last response (a trace is not stationary: its figures describe the trace). An open loop opens
    once the requests in flight are all ones sent after the schedule began (one median request
    lifetime, Little's law: the population then has its steady size) and closes at the last
    scheduled arrival; requests sent inside it are followed to their end (the drain)."""
    epoch = events.get("arrivals_start")
    run_end = events.get("stopping", max((r.t_end or r.t_send for r in records), default=0.0))
    if epoch is None:
        start = min((r.t_send for r in records), default=0.0)
        return window_of(start, max(run_end, start), start, max(run_end, start), False,
                      "the schedule never started (Locust did not finish spawning its users)")
    if replay:
        end = min(run_end, events.get("drained", run_end))
        return window_of(epoch, max(end, epoch), epoch, max(run_end, epoch), end > epoch,
                      "trace replay: the whole schedule, from its start to the last response")
    ratio = run_tokens_per_chunk(records)
    lifetimes = [e2e(done) for r in records if (done := Done.of(r, ratio)) is not None]
    settle = median(lifetimes) if lifetimes else 0.0
    start = epoch + max(ramp_s, settle)
    end = min(run_end, epoch + last_offset)
    reason = (f"the schedule began, plus {'the ramp' if ramp_s >= settle else 'one median request lifetime'} "
              f"({max(ramp_s, settle):.2f} s); closes at the last scheduled arrival")
    if end <= start:
        return window_of(epoch, max(end, epoch), epoch, run_end, False,
                      f"the schedule ended before a steady state ({reason}); lengthen duration_s or raise the rate")
    return window_of(start, end, epoch, run_end, True, reason)


def arrival_stats(records: list[RequestRecord], window: Window, offsets: list[float], epoch: float | None,
                  rate: float | None, burstiness: float | None, capped: bool, pool: int, factor: float = 1.0) -> ArrivalStats:
    """What the schedule asked for inside the window and what the client did: the achieved rate,
    the client-side queueing delay (scheduled -> sent), how late arrivals that found a free user
    were sent, and (open loop) whether the sent gaps fit the Gamma distribution the schedule drew
    (Kolmogorov-Smirnov, on the gaps divided by the schedule's normalisation `factor`: see
    rig.load.workload.gamma_schedule)."""
    from scipy import stats

    from rig.load.workload import arrivals_in

    if epoch is None or not offsets:
        return ArrivalStats(scheduled=0, sent=0, note="the schedule never started")
    start, end = window.start, window.end
    mine = [r for r in records if r.t_scheduled is not None and start <= r.t_scheduled <= end]
    scheduled = arrivals_in(offsets, epoch, start, end)
    # the window's arrivals that were sent (at whatever lateness: that is the delays' to say); counted by
    # send time, the arrival at the window's close (it closes at the last one) was always sent just after it
    sent = len(mine)
    # the schedule's own delays run to when the user began the request (building it is the client's
    # cost per request, not the schedule's; older records have no t_start: their send)
    delays = [(r.t_start or r.t_send) - wanted for r in mine if (wanted := r.t_scheduled) is not None]
    queued = [r for r in mine if r.queued]
    dispatch = [(r.t_start or r.t_send) - wanted for r in mine if not r.queued and (wanted := r.t_scheduled) is not None]
    out = ArrivalStats(
        target_rate=rate, scheduled=scheduled, scheduled_rate=scheduled / window.seconds,
        sent=sent, achieved_rate=sent / window.seconds,
        achieved_vs_target=sent / window.seconds / rate if rate else None,
        unsent=max(0, scheduled - len(mine)), queued=len(queued), queued_share=len(queued) / len(mine) if mine else 0.0,
        queue_delay_s=describe(delays), dispatch_lateness_s=describe(dispatch),
        pool=pool, capped=capped,
    )
    if rate and burstiness:
        sends = sorted(r.t_send for r in mine)
        gaps = [(b - a) / factor for a, b in zip(sends, sends[1:])]
        if len(gaps) >= 20:
            result = stats.kstest(gaps, "gamma", args=(burstiness, 0.0, 1.0 / (rate * burstiness)))
            out.gaps = GapFit(n=len(gaps), distribution=f"gamma(shape={burstiness:g}, scale=1/({rate:g}*{burstiness:g}))",
                              normalisation=factor, ks_statistic=float(result.statistic), ks_p=float(result.pvalue),
                              mean_s=float(np.mean(gaps)), cv=float(np.std(gaps) / np.mean(gaps)))
    return out


def arrival_problems(arrivals: ArrivalStats) -> list[str]:
    """Why an arrival-driven run's client did not deliver the schedule (client INVALID reasons)."""
    reasons: list[str] = []
    if not arrivals.scheduled:
        return reasons
    if not arrivals.capped and arrivals.queued_share > QUEUED_LIMIT:
        reasons.append(f"{arrivals.queued} arrival(s) ({100 * arrivals.queued_share:.1f}%) waited for a free user: "
                       f"the pool of {arrivals.pool} users is too small for this load (raise users)")
    if arrivals.unsent > UNSENT_LIMIT * arrivals.scheduled:
        reasons.append(f"{arrivals.unsent} of {arrivals.scheduled} scheduled arrivals in the window were never sent")
    lateness = arrivals.dispatch_lateness_s.p99 if arrivals.dispatch_lateness_s else None
    if lateness is not None and 1000 * lateness > ARRIVAL_LATENESS_LIMIT_MS:
        reasons.append(f"arrivals that found a free user were sent {1000 * lateness:.1f} ms late at p99 > {ARRIVAL_LATENESS_LIMIT_MS} ms")
    return reasons
