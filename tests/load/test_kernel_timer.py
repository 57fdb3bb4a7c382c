"""The lag monitor's kernel timer (rig.load.kernel_timer): a descriptor the event loop waits on as on
a socket, readable once its due time has passed and not before. No timing is asserted: a due time in
the past is waited for (without a deadline that could fail on a slow box), one an hour ahead is not
expected to come."""

from __future__ import annotations

import os
import select
import time
import types

import pytest

from rig.load import kernel_timer
from rig.load.kernel_timer import KernelTimer, TimerUnavailable

HOUR = 3600.0


@pytest.fixture
def timer():
    made = KernelTimer()
    yield made
    made.close()


def readable(fd: int, wait: float | None) -> bool:
    return bool(select.select([fd], [], [], wait)[0])


def test_a_due_time_past_makes_it_readable_and_one_read_clears_it(timer):
    timer.arm(time.monotonic() - 1.0)
    assert readable(timer.fileno(), None)
    assert timer.consume() == 1
    assert timer.consume() == 0 and not readable(timer.fileno(), 0)


def test_a_due_time_ahead_does_not_make_it_readable(timer):
    timer.arm(time.monotonic() + HOUR)
    assert not readable(timer.fileno(), 0)
    assert timer.consume() == 0


def test_rearming_replaces_the_due_time(timer):
    timer.arm(time.monotonic() + HOUR)
    timer.arm(time.monotonic() - 1.0)  # what the monitor does each period: one outstanding due time
    assert readable(timer.fileno(), None) and timer.consume() == 1
    timer.arm(time.monotonic() + HOUR)
    assert not readable(timer.fileno(), 0)


def test_the_descriptor_does_not_block_and_is_not_inherited(timer):
    assert not os.get_blocking(timer.fileno()) and not os.get_inheritable(timer.fileno())


def test_a_monotonic_clock_other_than_clock_monotonic_is_refused(monkeypatch):
    monkeypatch.setattr(kernel_timer.time, "get_clock_info", lambda name: types.SimpleNamespace(implementation="mach_absolute_time()"))
    with pytest.raises(TimerUnavailable, match="CLOCK_MONOTONIC"):
        KernelTimer()


def test_the_report_names_a_sleep_probe_and_a_run_that_recorded_none():
    """A gevent sleep overstates a socket read's lag by up to 1 ms: the client line says so, for a
    run that used one and for one recorded before the probe was named (its verdict lists none)."""
    import numpy as np
    from simulated_runs import round_result, simulate_round

    from rig.load.report import client_note
    from rig.load.summary import ClientBound
    from rig.load.wire import LAG_PROBE_KERNEL, LAG_PROBE_SLEEP

    _, summary = round_result(simulate_round(np.random.default_rng(1), 0.01, 0.05, 10.0), 10.0, None)
    summary.client.figures = {"user_decode_tok_s": ClientBound(bound=0.001, limit=0.01, holds=True)}
    notes = {}
    for probes in ([LAG_PROBE_KERNEL], [LAG_PROBE_SLEEP], [LAG_PROBE_KERNEL, LAG_PROBE_SLEEP], []):
        summary.client.lag_probes = probes
        notes[tuple(probes)] = client_note(summary)
    assert [LAG_PROBE_SLEEP in note for note in notes.values()] == [False, True, True, True]
    summary.client.processes = 0  # no client statistics at all: nothing to say about a probe
    assert LAG_PROBE_SLEEP not in client_note(summary)
