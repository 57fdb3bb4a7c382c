"""The sources that hold a user's timeline back behind the ideal client's (docs/client-error.md): its
first send (R6), each turnaround between its requests (R7), an arrival schedule's own sends (R8).
Each returns Hold(start_s, seconds, rule)."""

from __future__ import annotations

from rig.load.client_error.delays import CLOCK_RESOLUTION_S, LagProfile
from rig.load.client_error.terms import Hold
from rig.load.records import RequestRecord

OPENING_EVENTS = 2  # the opening call's connect completing (its request is written at once) and its answer read


def first_send_hold(first: RequestRecord, profile: LagProfile, master: LagProfile | None) -> Hold:
    """R6: how much later than the ideal client a closed-loop user sent its first request.
    Records that say which round of the spawn started the user (t_dispatched, dispatch_behind): the
    pacer's (the master's; in one process its own) stretches before the round, the longest stretch a
    short sample of the pacer may come from (the round's own wake-up), every late wake-up of its pace
    (dispatch_behind), and everything from the round to the send, less the server's answer to the
    opening call (its time, less the process's stretches inside it and a short stretch at each of its
    two wake-ups). Records that do not say: every stretch of the process, and of the master, begun by
    the send."""
    if first.t_dispatched is not None and first.dispatch_behind is not None:
        pacer = master if master is not None else profile
        late_s = (pacer.begun_by_s(first.t_dispatched) + pacer.short_stretch_s + first.dispatch_behind
                  + first.t_send - first.t_dispatched)
        if first.opening is not None:
            began, read = first.opening
            late_s -= max(0.0, read - began - profile.inside_s(began, read) - OPENING_EVENTS * profile.short_stretch_s)
        return Hold(first.t_send, late_s, "R6")
    return Hold(first.t_send, profile.begun_by_s(first.t_send) + (master.begun_by_s(first.t_send) if master is not None else 0.0), "R6")


def next_turn(previous: RequestRecord, following: RequestRecord) -> bool:
    """The following request is the next turn of the same conversation (ConversationUser thinks
    before it; after a conversation's last turn or a failed one it starts the next at once)."""
    return (previous.conversation is not None and following.conversation == previous.conversation
            and previous.turn is not None and following.turn == previous.turn + 1)


def turnaround_hold(previous: RequestRecord, following: RequestRecord, profile: LagProfile, end_read_late_s: float,
                    pause_s: float) -> Hold:
    """R7: at a request's end as read, the user's timeline is held back by the time to its next send
    (less a conversation's think time, which the ideal client waits too), plus how late that end was
    read: a long stretch that reached it, its loop-pass wait, and `end_read_late_s` (a short delay).
    After a failed request only to the next request's start (the new connection's handshake is the
    server's), plus the long stretches over that pending connect."""
    ended = next(t for t in (previous.t_end, previous.t_last, previous.t_send) if t is not None)
    late_read_s = profile.run_late_s(ended) + (previous.chunk_wait(len(previous.chunks) - 1) if previous.chunks else 0.0)
    began = following.t_start if previous.error is not None and following.t_start is not None else following.t_send
    pending_s = profile.overlapping_s(began, following.t_send) if began < following.t_send else 0.0
    paused_s = pause_s if next_turn(previous, following) else 0.0
    return Hold(ended, max(0.0, began - ended - paused_s) + late_read_s + end_read_late_s + pending_s, "R7")


def span_end_s(record: RequestRecord, run_end_s: float) -> float:
    """Until when a request may still bring tokens: its end as read; one with no end (the run's end
    cut it) to the run's end, where reads stopped."""
    ends = [t for t in (record.t_end, record.t_last, *record.chunks[-1:]) if t is not None]
    return max(ends) if record.t_end is not None and record.error is None else max([run_end_s, *ends])


def scheduled_holds(requests: list[RequestRecord], read_late_s: float, run_end_s: float) -> tuple[Hold, ...]:
    """R8: an arrival-driven user's shifts. The ideal client sends each arrival at its scheduled time,
    so a request runs behind it by s = sent - scheduled (a queued arrival's wait included), not
    carried to the next request. A token crosses an edge E only if E lies in (scheduled - read_late_s,
    span end]: the shift at E is the largest s of the requests whose span holds E, else 0. Returned as
    the changes of that shift."""
    # each span up to and including its end (it lapses a clock step after): the run's end cuts at run_end_s exactly
    spans = sorted((r.t_scheduled - read_late_s, span_end_s(r, run_end_s) + CLOCK_RESOLUTION_S,  # type: ignore[operator]
                    max(0.0, r.t_send - r.t_scheduled)) for r in requests)
    changes = sorted({t for start, end, _ in spans for t in (start, end)})
    holds, level, active = [], 0.0, 0
    for t in changes:  # the largest shift of the spans open from t on
        while active < len(spans) and spans[active][0] <= t:
            active += 1
        shift = max((s for start, end, s in spans[:active] if start <= t < end), default=0.0)
        if shift != level:
            holds.append(Hold(t, shift - level, "R8"))
            level = shift
    return tuple(holds)
