"""The bounds' inputs built from a run's records and lag samples, one per Locust process
(docs/client-error.md): each process's requests and delays, and its part of the aggregate."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from rig.load import request_metrics
from rig.load.client_error.aggregate import aggregate_parts
from rig.load.client_error.delays import LagProfile
from rig.load.client_error.inputs import FigureInputs
from rig.load.client_error.timeline import FirstChunks
from rig.load.records import RequestRecord
from rig.load.request_metrics import Done, done_in_window
from rig.load.summary import Window
from rig.load.wire import ClientStats


def figure_inputs(records: list[RequestRecord], window: Window, clients: list[ClientStats],
                  dispatcher: ClientStats | None = None, pause_s: float = 0.0) -> list[FigureInputs]:
    """Each Locust process's requests and delays, as the bounds read them."""
    done = done_in_window(records, window.start, window.end)
    measured = request_metrics.measured_tokens_per_chunk(records)
    ratio, ratio_known = (1.0, False) if measured is None else (measured, True)
    records_of: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        records_of[r.process].append(r)
    by_process: dict[str, list[Done]] = defaultdict(list)
    for d in done:
        by_process[d.record.process].append(d)
    profiles = {c.process: c for c in clients}
    master = LagProfile.of(dispatcher, window.start, window.end) if dispatcher is not None else None
    # (an arrival schedule's window is no closed loop's steady state)
    first_chunks = FirstChunks(np.sort([r.chunks[0] for r in records if r.chunks]),
                               max((request_metrics.chunk_token_counts(r, ratio)[0] for r in records if r.chunks), default=1.0),
                               window.steady and all(r.t_scheduled is None for r in records))
    inputs: list[FigureInputs] = []
    # every process whose streams the window counts (one whose requests all outlast it finished none inside it)
    counted = {r.process for r in records if any(window.start <= t <= window.end for t in r.chunks)}
    for process in sorted(set(by_process) | counted):
        process_done = by_process.get(process, [])
        client = profiles.get(process)
        if client is None:  # a process that wrote no lag samples: the worst process's delays stand in
            client = max(clients, key=lambda c: max((lag for _, lag in c.lag), default=0.0), default=None)
        if client is None:
            continue
        # the delays that reached these requests: from the window's start to the last chunk read of one sent inside it
        end = max(window.end, max((d.last for d in process_done), default=window.end))
        inputs.append(FigureInputs(process_done, LagProfile.of(client, window.start, end), window,
                                   records_of[process], ratio, ratio_known, master, pause_s, first_chunks))
    return [replace(i, aggregate=aggregate_parts(i)) for i in inputs]
