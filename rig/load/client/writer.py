"""Where a Locust process's request records go: its own JSONL beside the run, in batches."""

from __future__ import annotations

import os
from typing import IO, Any


class RecordWriter:
    """Appends one JSON line per request, in batches: a write per request cost a system call per
    request; lines are flushed every FLUSH_S and when the process quits (Locust's SIGINT/SIGTERM
    handling and the run's end both quit it), so an interrupted run keeps what it measured, and a
    SIGKILL loses at most FLUSH_S of records. A worker on another machine (the run's directory is
    not here) keeps its lines in `outbox` instead, for its master (rig.load.client.shipping)."""

    FLUSH_S = 0.5

    def __init__(self, out_dir: str, process_id: str, shipping: bool) -> None:
        self.path = os.path.join(out_dir, f"records-{process_id}.jsonl")
        self.shipping = shipping
        self.handle: IO[str] | None = None
        self.outbox: list[str] = []
        self.pending: list[str] = []
        self.flusher: Any = None

    def write(self, line: str) -> None:
        if self.shipping:
            self.outbox.append(line)
            return
        self.pending.append(line)
        if self.flusher is None:
            import gevent

            self.flusher = gevent.spawn(self._flush_periodically)

    def _flush_periodically(self) -> None:
        import gevent

        while True:
            gevent.sleep(self.FLUSH_S)
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        if self.handle is None:
            self.handle = open(self.path, "a")  # noqa: SIM115
        lines, self.pending = self.pending, []
        self.handle.write("".join(line + "\n" for line in lines))
        self.handle.flush()
