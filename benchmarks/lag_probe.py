"""Does the client's lag probe tell how late its chunks are read? A gevent sleep against a kernel timer.

The client bounds its figures by its event loop's lag (rig.load.client_error), measured by the
locustfile's lag monitor. The figures are built from socket reads; this measures, side by side, the
lag each probe reports and the real lateness of socket events in the same loop: a forked sender
writes its send time (time.monotonic(), one clock for both processes) over socketpairs at a fixed
period, one chunk to every stream at once (as an engine's step sends one to every running request),
and the loop reads each stream in a greenlet of its own, doing `--work-us` of work per chunk (what
parsing and recording cost). A probe is faithful when its lag is at least the chunks' (a bound must
not understate) and not much more. Each probe waits as the locustfile's monitor does (a kernel timer,
a wait drawn between half and all of LAG_PERIOD_S; or a gevent sleep of LAG_PERIOD_S, as before).
Each chunk's read also takes its wait behind the loop's own work as the locustfile's reads do
(rig.load.loop_passes): the client's bound puts that wait on each recorded time and the probe's delay
on top, so what the probe must cover is a chunk's lateness beyond that wait (the last column). With
SEND_US, every TOKENS chunks a stream yields once (gevent.sleep(0), as Locust between tasks) and
works SEND_US, as building its next request does, between two of the loop's passes.

    python3 benchmarks/lag_probe.py [--seconds 8] [--case STREAMS:PERIOD_MS:WORK_US[:SEND_US:TOKENS] ...]

Each case runs once per probe, in fresh processes (two probes in one loop wake each other). Prints
one row per case and probe, with the sample counts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from rig.load.loop_passes import LoopPasses
from rig.load.wire import LAG_PERIOD_S

REPO = Path(__file__).resolve().parents[1]
STAMP = struct.Struct("d")
# one stream at prose-c1's chunk cadence (two tokens every 8.9 ms), at half of it, at prefill-8k's,
# and engine-like bursts: 32 and 16 streams per step of about the monitor's period
CASES = ["1:8.9:20", "1:4.4:20", "1:270:20", "32:10:60", "16:9.7:80", "32:10:60:600:48"]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))] if ordered else float("nan")


def _send(ends: list[socket.socket], period: float, seconds: float) -> None:
    start = time.monotonic()
    for i in range(int(seconds / period)):
        wait = start + (i + 1) * period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            for end in ends:
                end.sendall(STAMP.pack(time.monotonic()))
        except BrokenPipeError:
            break


def _work(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def measure(probe: str, streams: int, period: float, work: float, seconds: float, send: float = 0.0,
            tokens: int = 0) -> dict[str, float]:
    """One case in this process (call it in a fresh one): the probe's lag and the chunks' lateness."""
    import gevent
    from gevent import socket as gsocket
    from gevent.socket import wait_read

    from rig.load.kernel_timer import KernelTimer

    pairs = [socket.socketpair() for _ in range(streams)]
    sender = os.fork()
    if sender == 0:
        for ours, _ in pairs:
            ours.close()
        _send([theirs for _, theirs in pairs], period, seconds)
        os._exit(0)
    chunk_lateness: list[float] = []
    beyond_wait: list[float] = []  # each chunk's lateness less its wait in its loop pass
    probe_lag: list[float] = []
    passes = LoopPasses()  # as the locustfile's reads take their waits
    passes.watch()

    def read_chunks(ours: socket.socket) -> None:
        stream, pending, count = gsocket.socket(fileno=ours.detach()), b"", 0
        while data := stream.recv(65536):
            now = time.monotonic()
            waited = passes.waited_us(time.time()) / 1e6
            pending += data
            whole = len(pending) - len(pending) % STAMP.size
            late = [now - sent for (sent,) in STAMP.iter_unpack(pending[:whole])]
            chunk_lateness.extend(late)
            beyond_wait.extend(value - waited for value in late)
            pending = pending[whole:]
            _work(work)
            count += len(late)
            if send and count >= tokens:  # a request ended: the next is built between two passes
                count = 0
                gevent.sleep(0)
                _work(send)

    def sleep_probe() -> None:
        while True:
            due = time.monotonic() + LAG_PERIOD_S
            gevent.sleep(LAG_PERIOD_S)
            probe_lag.append(time.monotonic() - due)

    def kernel_probe() -> None:
        timer, phases = KernelTimer(), random.Random(os.getpid())
        while True:
            due = time.monotonic() + phases.uniform(LAG_PERIOD_S / 2, LAG_PERIOD_S)
            timer.arm(due)
            wait_read(timer.fileno())
            probe_lag.append(time.monotonic() - due)
            timer.consume()

    for _, theirs in pairs:
        theirs.close()
    gevent.spawn(sleep_probe if probe == "gevent sleep" else kernel_probe)
    gevent.joinall([gevent.spawn(read_chunks, ours) for ours, _ in pairs])
    os.waitpid(sender, 0)
    return {"probe_samples": len(probe_lag), "chunks": len(chunk_lateness),
            "probe_p50_ms": 1e3 * _quantile(probe_lag, 0.5), "probe_p99_ms": 1e3 * _quantile(probe_lag, 0.99),
            "chunk_p50_ms": 1e3 * _quantile(chunk_lateness, 0.5), "chunk_p99_ms": 1e3 * _quantile(chunk_lateness, 0.99),
            "beyond_p50_ms": 1e3 * _quantile(beyond_wait, 0.5), "beyond_p99_ms": 1e3 * _quantile(beyond_wait, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--case", nargs="+", default=CASES, help="STREAMS:PERIOD_MS:WORK_US (default: %(default)s)")
    parser.add_argument("--one", nargs=2, metavar=("PROBE", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        streams, period_ms, work_us, *sends = args.one[1].split(":")
        send_us, tokens = sends if sends else ("0", "0")
        print(json.dumps(measure(args.one[0], int(streams), float(period_ms) / 1e3, float(work_us) / 1e6, args.seconds,
                                 float(send_us) / 1e6, int(tokens))))
        return
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    print("streams x period, work/chunk | probe        | probe's lag p50 / p99 (samples) | chunks' lateness p50 / p99 (chunks) "
          "| beyond their wait behind the loop p50 / p99")
    for case in args.case:
        streams, period_ms, work_us, *sends = case.split(":")
        for probe in ("gevent sleep", "kernel timer"):
            run = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--one", probe, case],
                                 capture_output=True, text=True, check=True, cwd=REPO, env=environment)
            row = json.loads(run.stdout)
            sent = f", {sends[0]} us/{sends[1]}" if sends else ""
            print(f"{int(streams):4d} x {float(period_ms):6.1f} ms, {float(work_us):4.0f} us{sent} | {probe:12} | "
                  f"{row['probe_p50_ms']:6.3f} / {row['probe_p99_ms']:6.3f} ms ({row['probe_samples']:5d}) | "
                  f"{row['chunk_p50_ms']:6.3f} / {row['chunk_p99_ms']:6.3f} ms ({row['chunks']}) | "
                  f"{row['beyond_p50_ms']:6.3f} / {row['beyond_p99_ms']:6.3f} ms")


if __name__ == "__main__":
    main()
