"""The request record: one JSON line per request, written by the Locust user as the request
ends (loadtests/locustfile.py) and read back here, in one place, by everything that computes.

Kept free of heavy imports: the Locust processes (also remote workers) import it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

RECORD_SCHEMA = 3


@dataclass
class RequestRecord:
    """One streamed request, as the client saw it. Times are wall-clock seconds (time.time())."""

    id: str  # unique within the run: process + counter
    process: str  # the Locust process that sent it (host-pid)
    user: str  # the simulated user (process + user index): the unit of the steady-state window
    prompt: str  # prompt pool entry name
    t_send: float  # just before the request was sent
    prompt_tokens_target: int | None = None  # tokens the prompt was built to have (nonce included); None: not fixed (multi-turn)
    prompt_nonce: str | None = None  # the unique leading nonce that keeps prefix caches cold
    status: int | None = None  # HTTP status (0: no response)
    error: str | None = None  # None, or a short kind: http_503, connection, stream_cut, cut_by_window, ...
    error_detail: str | None = None
    t_first: float | None = None  # arrival of the first chunk carrying output (content or reasoning)
    t_last: float | None = None  # arrival of the last chunk carrying output: decode and E2E end here
    t_end: float | None = None  # the stream ended (after bookkeeping): never used for timing
    chunks: list[float] = field(default_factory=list)  # arrival time of every chunk carrying output
    # Output tokens per chunk, from the server's continuous usage (cumulative completion_tokens per
    # chunk); None when the server reports usage only at the end.
    chunk_tokens: list[int] | None = None
    usage: dict[str, Any] | None = None  # the final usage object
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when reported
    finish_reason: str | None = None
    text_sha256: str | None = None  # of the whole streamed output (content + reasoning)
    text: str | None = None  # kept only when the run re-tokenises outputs
    max_tokens: int | None = None  # the output length this request asked for (scenario's output_lengths)
    # Arrival-driven runs (open_loop, trace): the arrival's index in the schedule, when the schedule
    # wanted it sent, and whether it had to wait for a free user (the client's queue).
    arrival: int | None = None
    t_scheduled: float | None = None
    queued: bool | None = None
    conversation: str | None = None  # multi_turn: the conversation and the turn (0-based) this request is
    turn: int | None = None
    schema: int = RECORD_SCHEMA

    def to_line(self) -> str:
        # vars(), not asdict(): asdict deep-copies every chunk timestamp (measured: 1.25 ms for a
        # 200-chunk record, 6 us per token event, in the Locust process's budget).
        return json.dumps({k: v for k, v in vars(self).items() if v is not None}, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def complete(self) -> bool:
        return self.error is None and self.t_first is not None and self.finish_reason is not None

    @property
    def usage_tokens(self) -> int | None:
        value = (self.usage or {}).get("completion_tokens")
        return int(value) if value is not None else None

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return int(value) if value is not None else self.prompt_tokens_target


def read_records(directory: Path) -> list[RequestRecord]:
    """Every record of a run directory; a line cut by a kill mid-write is skipped."""
    records = []
    for path in sorted(directory.glob("records-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "t_send" in data:
                records.append(RequestRecord.from_json(data))
    return records
