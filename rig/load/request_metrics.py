"""Each request-level figure defined once: time to first token, end-to-end latency, time per output
token and inter-token latency, on a completed request whose times are never None.

Every reader of per-request latency (a run's summary, its steady-state window, goodput, a
comparison's pooled percentiles, multi-turn statistics, the peer export) takes `Done` records from
`done_in_window` (or `Done.of`) and these functions, so a definition cannot drift between them.
Decode runs from the first to the last chunk carrying output (reasoning included); E2E ends at the
last one too, never at the stream's bookkeeping end. Tokens are counted, not assumed
(`chunk_token_counts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rig.load.records import RequestRecord


def measured_tokens_per_chunk(records: list[RequestRecord]) -> float | None:
    """The run's own usage/chunk ratio over requests whose final usage is known: how many tokens
    a chunk carries when the server does not say (several under MTP or speculative decoding).
    None when no request finished with its usage."""
    tokens = chunks = 0
    for record in records:
        if record.complete and record.usage_tokens and record.chunks:
            tokens += record.usage_tokens
            chunks += len(record.chunks)
    return tokens / chunks if chunks else None


def run_tokens_per_chunk(records: list[RequestRecord]) -> float:
    """measured_tokens_per_chunk, or one token a chunk when the run measured none."""
    measured = measured_tokens_per_chunk(records)
    return 1.0 if measured is None else measured


def counted_at_the_run_ratio(record: RequestRecord) -> bool:
    """A stream whose chunks say nothing of their tokens: neither continuous usage nor a final usage."""
    exact = record.chunk_tokens is not None and len(record.chunk_tokens) == len(record.chunks)
    return not exact and not (record.usage_tokens is not None and record.chunks and record.finish_reason is not None)


def chunk_token_counts(record: RequestRecord, ratio: float) -> list[float]:
    """Tokens carried by each output chunk: exact from continuous usage; from the final usage spread
    evenly; for a stream cut before its usage arrived, the run's own tokens-per-chunk ratio."""
    if counted_at_the_run_ratio(record):
        return [ratio] * len(record.chunks)
    if record.chunk_tokens is not None and len(record.chunk_tokens) == len(record.chunks):
        return [float(n) for n in record.chunk_tokens]
    return [record.usage_tokens / len(record.chunks)] * len(record.chunks)  # type: ignore[operator]


def tokens_read_between(records: list[RequestRecord], start: float, end: float, ratio: float) -> float:
    """Output tokens whose chunks the client read inside [start, end], every stream's (the
    aggregate's count: streams an edge cut count what arrived inside)."""
    return sum(tokens for r in records for arrival, tokens in zip(r.chunks, chunk_token_counts(r, ratio))
               if start <= arrival <= end)


@dataclass(frozen=True)
class Done:
    """A completed request: sent, first and last output chunk (wall-clock seconds), tokens per chunk."""

    record: RequestRecord
    sent: float
    first: float
    last: float
    chunk_tokens: tuple[float, ...]

    @classmethod
    def of(cls, record: RequestRecord, ratio: float) -> Done | None:
        """The completed view of a record; None for one that failed, was cut or never produced output."""
        if not record.complete or record.t_first is None or record.t_last is None or not record.chunks:
            return None
        return cls(record, record.t_send, record.t_first, record.t_last, tuple(chunk_token_counts(record, ratio)))

    @property
    def decoded_tokens(self) -> float:
        """Output tokens after the first chunk: what decode time produced."""
        return sum(self.chunk_tokens) - self.chunk_tokens[0]


def done_in_window(records: list[RequestRecord], start: float, end: float) -> list[Done]:
    """The completed requests a window's per-request figures cover: sent inside it. Tokens per chunk
    come from the whole run's records (a stream the window cut still says what a chunk carries)."""
    ratio = run_tokens_per_chunk(records)
    return [done for r in records if start <= r.t_send <= end and (done := Done.of(r, ratio)) is not None]


def ttft(done: Done) -> float:
    """Time to first token: request sent to the first chunk carrying output."""
    return done.first - done.sent


def e2e(done: Done) -> float:
    """End-to-end latency: request sent to the last chunk carrying output."""
    return done.last - done.sent


def decode_time(done: Done) -> float:
    """First to last output chunk: the time the decoded tokens took."""
    return done.last - done.first


def tpot(done: Done) -> float | None:
    """Time per output token after the first: decode time over decoded tokens; None for a request
    that decoded nothing after its first chunk."""
    seconds, tokens = decode_time(done), done.decoded_tokens
    return seconds / tokens if seconds > 0 and tokens > 0 else None


def itl(done: Done) -> list[float]:
    """Inter-token latency: every gap between consecutive output chunks (many per request)."""
    chunks = done.record.chunks
    return [b - a for a, b in zip(chunks, chunks[1:])]


# One value per request (None: the request has none), by the name SLOs and samples use.
PER_REQUEST: dict[str, Callable[[Done], float | None]] = {"ttft": ttft, "e2e": e2e, "tpot": tpot}
