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
