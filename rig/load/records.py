"""The request record: one JSON line per request, written by the Locust user as the request
ends (loadtests/locustfile.py) and read back here, in one place, by everything that computes.

Kept free of heavy imports (pydantic and rig.typed only): the Locust processes (also remote
workers) import it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, JsonValue, ValidationInfo, model_validator

from rig.typed import MAX_TIME_S, MAX_TOKENS, STORED, Versioned

RECORD_SCHEMA = 3
MAX_TIME = MAX_TIME_S


class RequestRecord(Versioned):
    """One streamed request, as the client saw it. Times are wall-clock seconds (time.time())."""

    schema_version: int = Field(RECORD_SCHEMA, alias="schema")

    id: str  # unique within the run: process + counter
    process: str  # the Locust process that sent it (host-pid)
    user: str  # the simulated user (process + user index): the unit of the steady-state window
    prompt: str  # prompt pool entry name
    t_send: float  # when the request was written whole to its socket (rig's client; before: just before it was built)
    t_start: float | None = None  # the user began the request (before building it): a schedule's dispatch is timed from here
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
    # Per chunk, microseconds between the earliest its bytes can have arrived, as the client's event
    # loop tells it (the start of the loop pass that read them when the loop waited for them, else of
    # the pass before), and the read that stamped it: the most it waited behind the loop's own work
    # (a step's chunks to many streams are read one after another, next requests are built between
    # passes). A bound, not a correction: bytes that arrived later waited less. None: not measured
    # (records of another tool, or of a rig before it measured them).
    chunk_waits_us: list[int] | None = None
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
    # A user's first request: when the round of the spawn that started the user was dispatched (on a
    # worker of a distributed run on the master's host, the master's spawn message: its clock is this
    # one; in Locust's local runner, the process's own round), and the user's opening call (GET
    # /v1/models) as it began and as its answer was read. The ideal client sends the first request at
    # the dispatch plus the server's answer to that call: what lies between is the client's.
    # dispatch_behind: how far that round ran behind the spawn's own pace (its earlier wake-ups late).
    t_dispatched: float | None = None
    dispatch_behind: float | None = None
    opening: tuple[float, float] | None = None

    @model_validator(mode="after")
    def _plausible(self, info: ValidationInfo) -> RequestRecord:
        """A record read back is input: its times must be times, in the order they happen, and its
        counts counts (a live record is built from the clock itself and not checked here)."""
        if info.context != STORED:
            return self
        times = [t for t in (self.t_start, self.t_send, self.t_first, self.t_last, self.t_end, self.t_scheduled) if t is not None]
        if any(not 0 <= t <= MAX_TIME for t in [*times, *self.chunks]):
            raise ValueError(f"a time outside 0..{MAX_TIME:g} s since the epoch")
        if self.chunks and (any(b < a for a, b in zip(self.chunks, self.chunks[1:])) or self.chunks[0] < self.t_send):
            raise ValueError("chunk arrivals go backwards (or come before the request was sent)")
        if self.t_start is not None and self.t_start > self.t_send:
            raise ValueError("t_start is after t_send")
        if self.dispatch_behind is not None and not 0 <= self.dispatch_behind <= MAX_TIME:
            raise ValueError("dispatch_behind is not a duration")
        spawn = [t for t in (self.t_dispatched, *(self.opening or ())) if t is not None]
        if any(not 0 <= t <= MAX_TIME for t in spawn) or any(b < a for a, b in zip(spawn, [*spawn[1:], self.t_send])):
            raise ValueError("t_dispatched, the opening call and t_send are not in the order they happen")
        if self.t_first is not None and self.t_first < self.t_send:
            raise ValueError("t_first is before t_send")
        if self.t_last is not None and self.t_first is not None and self.t_last < self.t_first:
            raise ValueError("t_last is before t_first")
        if any(t is not None and t < self.t_send for t in (self.t_last, self.t_end)):
            raise ValueError("the request ends (t_last or t_end) before it was sent (t_send): no request takes negative time")
        if self.chunk_tokens is not None and any(not 0 <= n <= MAX_TOKENS for n in self.chunk_tokens):
            raise ValueError(f"a token count in chunk_tokens outside 0..{MAX_TOKENS}")
        if self.chunk_waits_us is not None and (len(self.chunk_waits_us) != len(self.chunks) or any(w < 0 for w in self.chunk_waits_us)):
            raise ValueError("chunk_waits_us is not one wait of 0 us or more per chunk")
        for key in ("completion_tokens", "prompt_tokens"):
            value = (self.usage or {}).get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKENS):
                raise ValueError(f"usage.{key} {str(value)[:40]} is not a token count (a whole number 0..{MAX_TOKENS})")
        for name in ("prompt_tokens_target", "cached_tokens", "max_tokens"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_TOKENS:
                raise ValueError(f"{name} {str(value)[:40]} is not a token count (0..{MAX_TOKENS})")
        return self

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

    def chunk_wait(self, index: int) -> float:
        """The most chunk `index` waited behind its event loop's own work, in seconds (0: not measured)."""
        return self.chunk_waits_us[index] / 1e6 if self.chunk_waits_us else 0.0

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
    from rig.errors import Damaged
    from rig.strict_yaml import read_regular, strict_json

    records = []
    seen: dict[str, str] = {}  # id -> where it was read
    for path in sorted(directory.glob("records-*.jsonl")):
        lines = read_regular(path, RECORDS_MAX_BYTES).decode(errors="replace").splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                strict_json(line)  # duplicate keys and NaN refused before the record's own check
            except ValueError as error:
                if number == len(lines):  # a kill mid-write cuts the last line only: skipped
                    continue
                raise Damaged(where, "(line)", f"not a whole JSON record ({error}); only a file's last line may be cut",
                              "re-run this measurement; the file was edited or damaged") from None
            record = RequestRecord.parse_line(line, where)
            if record is None:
                continue
            if record.id in seen:  # each request is written once: a second copy would count it twice
                raise Damaged(where, "id", f"request {record.id[:80]!r} was already read at {seen[record.id]}",
                              "re-run this measurement; the file was edited or damaged")
            seen[record.id] = where
            records.append(record)
    return records
