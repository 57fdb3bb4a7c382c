"""Reading an OpenAI-compatible SSE stream at the cost of a byte scan per event.

The Locust user's per-event work is the client's capacity budget (benchmarks/client_capacity.py):
parsing every chunk as JSON and walking it as dicts cost more than everything else the client does
per token. An event is scanned with a few compiled byte patterns instead: whether it carries output
(content, reasoning or completion text), the running completion_tokens of continuous usage, and
finish_reason. The output pieces are kept as the escaped JSON bytes they arrived as and decoded once
per request; the last usage object is parsed once per request. Standard library only (the Locust
processes import it)."""

from __future__ import annotations

import json
import re
from typing import Any

_STRING = rb'\s*:\s*"((?:[^"\\]|\\.)*)"'
CHAT_OUTPUT = re.compile(rb'"(?:content|reasoning_content|reasoning)"' + _STRING)
COMPLETION_OUTPUT = re.compile(rb'"text"' + _STRING)
COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([^"\\]+)"')
USAGE = re.compile(rb'"usage"\s*:\s*\{')


class StreamScan:
    """One response's events, fed as they are read: one timestamp per network read applies to every
    event that read completed (the read, not the parse, is when the client saw them)."""

    __slots__ = ("_output", "_rest", "chunks", "waits_us", "per_chunk", "_pieces", "cumulative", "_attributed", "continuous",
                 "_usage", "finish_reason", "error")

    def __init__(self, chat: bool) -> None:
        self._output = CHAT_OUTPUT if chat else COMPLETION_OUTPUT
        self._rest = b""
        self.chunks: list[float] = []  # arrival of every event that carried output
        self.waits_us: list[int] = []  # the most each of those waited behind the loop's own work (RequestRecord.chunk_waits_us)
        self.per_chunk: list[int] = []  # completion tokens each of those carried (continuous usage)
        self._pieces: list[bytes] = []
        self.cumulative = 0  # completion tokens the server reported so far
        self._attributed = 0  # of those, tokens already assigned to an output chunk
        self.continuous = False  # usage came with output chunks (exact tokens per chunk)
        self._usage: bytes | None = None  # the last event that carried a usage object
        self.finish_reason: str | None = None
        self.error: bytes | None = None  # an error event the server sent instead of output

    def feed(self, data: bytes, now: float, waited_us: int = 0) -> None:
        lines = (self._rest + data).split(b"\n") if self._rest else data.split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                self.event(line, now, waited_us)

    def event(self, line: bytes, now: float, waited_us: int = 0) -> None:
        pieces = self._output.findall(line)
        usage = USAGE.search(line) is not None
        if usage:
            found = COMPLETION_TOKENS.search(line)
            if found:
                self.cumulative = int(found.group(1))
            self._usage = line
        if b'"finish_reason"' in line:
            found = FINISH_REASON.search(line)
            if found:
                self.finish_reason = found.group(1).decode()
        output = [piece for piece in pieces if piece]
        if output:
            self._pieces.extend(output)
            self.chunks.append(now)
            self.waits_us.append(waited_us)
            self.continuous = self.continuous or usage
            self.per_chunk.append(self.cumulative - self._attributed)
            self._attributed = self.cumulative
        elif not usage and b'"error"' in line:
            self.error = line

    def close(self) -> None:
        """The stream ended: an event without its trailing newline still counts."""
        if self._rest.startswith(b"data:"):
            self.event(self._rest, self.chunks[-1] if self.chunks else 0.0, self.waits_us[-1] if self.waits_us else 0)
        self._rest = b""

    @property
    def t_first(self) -> float | None:
        return self.chunks[0] if self.chunks else None

    @property
    def t_last(self) -> float | None:
        return self.chunks[-1] if self.chunks else None

    def usage(self) -> dict[str, Any] | None:
        """The last usage object the server sent, parsed once."""
        if self._usage is None:
            return None
        try:
            value = json.loads(self._usage[5:])
        except ValueError:
            return None
        usage = value.get("usage") if isinstance(value, dict) else None
        return usage if isinstance(usage, dict) else None

    def chunk_tokens(self) -> list[int] | None:
        """Completion tokens per output chunk from continuous usage (tokens reported after the last
        output chunk belong to it); None when the server reported usage only at the end."""
        if not (self.continuous and self.per_chunk):
            return None
        tokens = list(self.per_chunk)
        tokens[-1] += self.cumulative - self._attributed
        return tokens

    def text(self) -> str:
        """All output (content and reasoning), decoded once from the escaped pieces."""
        if not self._pieces:
            return ""
        return json.loads(b'"' + b"".join(self._pieces) + b'"')

    def error_detail(self) -> str | None:
        return self.error[5:].strip().decode(errors="replace")[:300] if self.error else None
