"""The request record: one JSON line per request, written by the Locust user as the request
ends (loadtests/locustfile.py) and read back here, in one place, by everything that computes.

Kept free of heavy imports (pydantic and rig.typed only): the Locust processes (also remote
workers) import it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, JsonValue

from rig.typed import Versioned

RECORD_SCHEMA = 3


class RequestRecord(Versioned):
    """One streamed request, as the client saw it. Times are wall-clock seconds (time.time())."""

    schema_version: int = Field(RECORD_SCHEMA, alias="schema")

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
    chunks: list[float] = Field(default_factory=list)  # arrival time of every chunk carrying output
    # Output tokens per chunk, from the server's continuous usage (cumulative completion_tokens per
    # chunk); None when the server reports usage only at the end.
    chunk_tokens: list[int] | None = None
    usage: dict[str, JsonValue] | None = None  # the server's final usage object, as it sent it
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

    def to_line(self) -> str:
        # pydantic's serializer: 6 us for a 200-chunk record (json.dumps of its fields: 60 us), in
        # the Locust process's budget.
        return self.model_dump_json(exclude_none=True)

    @property
    def complete(self) -> bool:
        return self.error is None and self.t_first is not None and self.finish_reason is not None

    def _usage(self, key: str) -> int | None:
        value = (self.usage or {}).get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def usage_tokens(self) -> int | None:
        return self._usage("completion_tokens")

    @property
    def prompt_tokens_usage(self) -> int | None:
        """The prompt's tokens as the server counted them (None: not reported)."""
        return self._usage("prompt_tokens")

    @property
    def prompt_tokens(self) -> int | None:
        usage = self.prompt_tokens_usage
        return usage if usage is not None else self.prompt_tokens_target


RECORDS_MAX_BYTES = 1 << 30  # one Locust process's records of one run (c=3000 for minutes: ~100 MB)


def read_records(directory: Path) -> list[RequestRecord]:
    """Every record of a run directory, each file read like every stored file (regular, size-capped:
    a FIFO or /dev/zero in its place is refused, never read); a line cut by a kill mid-write (not
    JSON) is skipped, a whole line that is not a record of this schema is refused in one line
    (StoredRecordError, a Damaged)."""
    from rig.strict_yaml import read_regular

    records = []
    for path in sorted(directory.glob("records-*.jsonl")):
        text = read_regular(path, RECORDS_MAX_BYTES).decode(errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            record = RequestRecord.parse_line(line, f"{path} line {number}") if line.strip() else None
            if record is not None:
                records.append(record)
    return records
