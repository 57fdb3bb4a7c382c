"""Which event tells how late the client reads a chunk: a gevent sleep or a kernel timer (timerfd)?

The client bounds its figures by its event loop's lag (rig.load.client_error), measured by the
locustfile's lag monitor. The figures are built from socket reads; this measures, side by side, the
lag each monitor reports and the lateness of real socket events in the same loop: a forked sender
writes its send time (time.monotonic(), one clock for both processes) over a socketpair at a fixed
period, as an engine streams chunks, and the loop records the read time of each. A monitor is faithful
when its lag is at least the chunks' (a bound must not understate) and not much more.

    python3 benchmarks/lag_probe.py [--seconds 8] [--periods-ms 8.9 4.4 270 0.5]

Each period runs twice, once per monitor, in fresh processes (two monitors in one loop wake each
other). Prints one row per period and monitor.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from rig.load.wire import LAG_PERIOD_S

REPO = Path(__file__).resolve().parents[1]
STAMP = struct.Struct("d")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))] if ordered else float("nan")


def _send(sock: socket.socket, period: float, seconds: float) -> None:
    start = time.monotonic()
    for i in range(int(seconds / period)):
        wait = start + (i + 1) * period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            sock.sendall(STAMP.pack(time.monotonic()))
        except BrokenPipeError:
            break


def measure(monitor: str, period: float, seconds: float) -> dict[str, float]:
    """One run in this process (call it in a fresh one): the monitor's lag and the chunks' lateness."""
    import gevent
    from gevent import socket as gsocket
    from gevent.socket import wait_read

    from rig.load.kernel_timer import KernelTimer

    ours, theirs = socket.socketpair()
    sender = os.fork()
    if sender == 0:
        ours.close()
        _send(theirs, period, seconds)
        os._exit(0)
    theirs.close()
    stream = gsocket.socket(fileno=ours.detach())
    chunk_lateness: list[float] = []
    monitor_lag: list[float] = []

    def read_chunks() -> None:
        pending = b""
        while data := stream.recv(65536):
            now = time.monotonic()
            pending += data
            whole = len(pending) - len(pending) % STAMP.size
            chunk_lateness.extend(now - sent for (sent,) in STAMP.iter_unpack(pending[:whole]))
            pending = pending[whole:]

    def sleep_monitor() -> None:
        while True:
            due = time.monotonic() + LAG_PERIOD_S
            gevent.sleep(LAG_PERIOD_S)
            monitor_lag.append(time.monotonic() - due)

    def kernel_monitor() -> None:
        timer = KernelTimer()
        while True:
            due = time.monotonic() + LAG_PERIOD_S
            timer.arm(due)
            wait_read(timer.fileno())
            monitor_lag.append(time.monotonic() - due)
            timer.consume()

    gevent.spawn(sleep_monitor if monitor == "gevent sleep" else kernel_monitor)
    gevent.spawn(read_chunks).join()
    os.waitpid(sender, 0)
    return {"chunks": len(chunk_lateness), "monitor_p50_ms": 1e3 * _quantile(monitor_lag, 0.5),
            "monitor_p99_ms": 1e3 * _quantile(monitor_lag, 0.99), "chunk_p50_ms": 1e3 * _quantile(chunk_lateness, 0.5),
            "chunk_p99_ms": 1e3 * _quantile(chunk_lateness, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--periods-ms", type=float, nargs="+", default=[8.9, 4.4, 270.0, 0.5])
    parser.add_argument("--one", nargs=2, metavar=("MONITOR", "PERIOD_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], float(args.one[1]) / 1e3, args.seconds)))
        return
    print(f"{'chunk period':>12} | {'monitor':12} | monitor lag p50 / p99 | chunks' lateness p50 / p99 | chunks")
    for period_ms in args.periods_ms:
        for monitor in ("gevent sleep", "kernel timer"):
            run = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--one", monitor, str(period_ms)],
                                 capture_output=True, text=True, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
            row = json.loads(run.stdout)
            print(f"{period_ms:9.1f} ms | {monitor:12} | {row['monitor_p50_ms']:7.3f} / {row['monitor_p99_ms']:6.3f} ms    | "
                  f"{row['chunk_p50_ms']:7.3f} / {row['chunk_p99_ms']:6.3f} ms        | {row['chunks']}")


if __name__ == "__main__":
    main()
