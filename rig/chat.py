"""A streamed chat request against a booted server: what `make demo` and `rig chat` print, and
what greedy identity hashes."""

from __future__ import annotations

import sys
import time
from typing import Any

from pydantic import JsonValue

from rig import client
from rig.typed import Typed


class ChatResult(Typed):
    """One streamed chat completion: its text, chunks, the server's usage object, and timings."""

    text: str
    chunks: int
    usage: dict[str, JsonValue] | None
    finish_reason: str | None
    ttft_s: float | None
    total_s: float


def stream_chat(base_url: str, model: str, prompt: str, max_tokens: int = 48, out: Any = None,
                extra: dict[str, Any] | None = None) -> ChatResult:
    """Stream one chat completion at temperature 0, its text written to `out` (default: the
    sys.stdout of the moment of the call); `extra` adds request fields (e.g. ignore_eos)."""
    out = out if out is not None else sys.stdout
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, **(extra or {})}
    start = time.perf_counter()
    first = None
    chunks = 0
    usage = None
    finish = None
    text = []
    with client.session() as http, http.post(f"{base_url}/v1/chat/completions", json=body, stream=True, timeout=120) as response:
        response.raise_for_status()
        for event in client.parse_stream(response.iter_lines(), chat=True):
            usage = event.usage or usage
            finish = event.finish_reason or finish
            if event.has_output:
                if first is None:
                    first = time.perf_counter()
                chunks += 1
                text.append(event.text)
                out.write(event.text)
                out.flush()
    out.write("\n")
    end = time.perf_counter()
    return ChatResult(text="".join(text), chunks=chunks, usage=usage, finish_reason=finish,
                      ttft_s=None if first is None else first - start, total_s=end - start)
