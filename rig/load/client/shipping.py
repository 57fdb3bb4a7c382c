"""A remote worker's records and samples, shipped to its master with Locust's own worker reports.

A worker whose run directory is not on its machine keeps its request records and its samples and
hands them over at every report (`ship`, on report_to_master); the master appends the records to a
file of the same kind as a local process's and keeps each worker's samples for its client file
(`receive`, on worker_report). The keys of the shipped dict are the wire format between the two.
"""

from __future__ import annotations

import os
from typing import Any

from rig.load.client.monitor import Samples
from rig.load.client.writer import RecordWriter
from rig.load.wire import LAG_PROBE_SLEEP, ClientStats


class Shipping:
    """A worker's side (ship) and a master's side (receive, remote) of the records' shipping."""

    KEY = "rig"  # the key of rig's part of Locust's report dict

    def __init__(self, process_id: str, out_dir: str, writer: RecordWriter, samples: Samples) -> None:
        self.process_id, self.out_dir, self.writer, self.samples = process_id, out_dir, writer, samples
        self.remote: dict[str, Samples] = {}  # a master's: each remote worker's samples so far

    def ship(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        """report_to_master: a shipping worker's records and samples since its last report."""
        if not self.writer.shipping:
            return
        taken = self.samples.take()
        data[self.KEY] = {"process": self.process_id, "records": self.writer.outbox[:], "lag": taken.lag, "cpu": taken.cpu,
                          "cpu_time": taken.cpu_time, "gc_pauses": taken.gc_pauses, "lag_probe": taken.lag_probe}
        self.writer.outbox.clear()

    def receive(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        """worker_report: a worker's shipped records go to its own records file here, its samples to
        its client file at the end (stats)."""
        shipped = data.get(self.KEY)
        if not shipped:
            return
        process = shipped["process"]
        if shipped["records"]:
            with open(os.path.join(self.out_dir, f"records-{process}.jsonl"), "a") as handle:
                handle.write("".join(line + "\n" for line in shipped["records"]))
        remote = self.remote.setdefault(process, Samples(lag_probe=LAG_PROBE_SLEEP))
        remote.lag_probe = shipped.get("lag_probe", LAG_PROBE_SLEEP)
        remote.lag += shipped["lag"]
        remote.cpu += shipped["cpu"]
        remote.cpu_time += shipped.get("cpu_time", [])
        remote.gc_pauses += shipped.get("gc_pauses", [])

    def stats(self) -> dict[str, ClientStats]:
        """Each remote worker's client statistics, by process."""
        return {process: samples.stats(process) for process, samples in self.remote.items()}
