"""A kernel timer the client's event loop waits on exactly as it waits on a socket: Linux's timerfd.

The locustfile's lag monitor measures how late the event loop runs an event that is due, and
rig.load.client_error bounds every figure by that delay. The events the figures are computed from
are socket reads (a chunk arrives, the loop gets to it). A gevent sleep is a different event: libev
arms its epoll wait in whole milliseconds, rounded up (ev_epoll.c `epoll_poll`, `EV_TS_TO_MSEC`), so
when a socket wakes the loop inside the monitor's sleep, the re-armed wait overshoots the sleep's end
by up to 1 ms, a lateness no socket event has. At c=1, with a chunk every few milliseconds, that
rounding was most of the measured lag (`python benchmarks/lag_probe.py` measures both probes).

A timerfd becomes readable at its due time (an absolute CLOCK_MONOTONIC time, the clock of
time.monotonic()), and the loop learns of it through the same epoll as of a socket, so its lateness
is a socket event's. Python gains os.timerfd_create only in 3.13; this reaches libc through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

CLOCK_MONOTONIC = 1  # <time.h>
TFD_TIMER_ABSTIME = 1  # <sys/timerfd.h>
TFD_NONBLOCK = os.O_NONBLOCK  # the timerfd flags are defined as these (timerfd_create(2))
TFD_CLOEXEC = os.O_CLOEXEC
NS_PER_S = 1_000_000_000


class TimerUnavailable(Exception):
    """This system offers no timerfd on the clock time.monotonic() reads (not Linux, or no libc)."""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError) as exc:
        raise TimerUnavailable(f"no timerfd in this process's C library ({exc})") from exc
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.POINTER(_Itimerspec)]
    settime.restype = ctypes.c_int
    return libc


class KernelTimer:
    """One-shot timer on CLOCK_MONOTONIC: arm(due) with a time.monotonic() value; the file
    descriptor becomes readable at `due`; consume() reads the expiry so the next arm starts clean."""

    def __init__(self) -> None:
        if time.get_clock_info("monotonic").implementation != "clock_gettime(CLOCK_MONOTONIC)":
            raise TimerUnavailable("time.monotonic() does not read CLOCK_MONOTONIC here")
        self._libc = _libc()
        fd = self._libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            raise TimerUnavailable(f"timerfd_create: {os.strerror(ctypes.get_errno())}")
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def arm(self, due: float) -> None:
        """Make the descriptor readable at `due` (seconds on time.monotonic()'s clock); a due time
        already past makes it readable at once."""
        ns = max(1, round(due * NS_PER_S))  # 0 would disarm it
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // NS_PER_S, ns % NS_PER_S))
        if self._libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), f"timerfd_settime: {os.strerror(ctypes.get_errno())}")

    def consume(self) -> int:
        """How many times the timer expired since the last read (0: not yet)."""
        try:
            return int.from_bytes(os.read(self.fd, 8), sys.byteorder)  # a u64 in host order
        except BlockingIOError:
            return 0

    def close(self) -> None:
        os.close(self.fd)
