"""One streamed request on the wire: its body, how its bytes are read and stamped, and what kind of
error ended it."""

from __future__ import annotations

import random
import time
from typing import Any

import requests
import urllib3

from rig.load.client.watchdog import Stalled, StallWatch
from rig.load.loop_passes import LoopPasses
from rig.load.wire import LoadConfig

CONNECT_TIMEOUT_S = 10.0


def payload(settings: LoadConfig, content: str | list[dict[str, str]], max_tokens: int) -> tuple[str, dict[str, Any]]:
    """The path and body of one request. continuous_usage_stats: SGLang and vLLM then put the running
    usage on every chunk, so a chunk's token count is known exactly (several per chunk under MTP or
    speculative decoding); servers that do not know the field ignore it and report usage once, at
    the end."""
    body: dict[str, Any] = {"model": settings.model, "stream": True, "max_tokens": max_tokens,
                            "temperature": settings.temperature, "seed": settings.seed,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    body.update(settings.extra_body)
    if settings.endpoint == "chat":
        body["messages"] = content if isinstance(content, list) else [{"role": "user", "content": content}]
        return "/v1/chat/completions", body
    body["prompt"] = content
    return "/v1/completions", body


def draw_nonce(settings: LoadConfig, rng: random.Random) -> str | None:
    """A unique leading nonce whose token count is fixed (its alphabet was checked against the
    served tokenizer when the prompts were built), so every prompt misses the prefix cache."""
    return settings.nonce.sample(rng) if settings.nonce is not None else None


def reads(response: Any) -> Any:
    """The body as the network delivers it: one HTTP chunk at a time for chunked streams (every
    SGLang, vLLM and uvicorn stream), else whatever one read returns. A fixed-size read would wait
    for a buffer to fill and stamp a burst of tokens with one late time."""
    raw = response.raw
    if raw.chunked and raw.supports_chunked_reads():
        return raw.stream(None, decode_content=True)
    return iter(lambda: raw.read1(65536), b"")


def stream_into(response: Any, scan: Any, watch: StallWatch, passes: LoopPasses) -> None:
    """Feeds the body to `scan` as it arrives, each read stamped once (the record's time and the
    stall watch's), with the most it can have waited behind the loop's own work (passes)."""
    for data in reads(response):
        now = time.time()
        watch.last = now
        scan.feed(data, now, passes.waited_us(now))


def error_kind(error: Exception) -> str:
    """A short kind for the record. The body is read from urllib3 directly (see reads), so its
    errors arrive unwrapped: a connection that broke mid-body is a cut stream."""
    if isinstance(error, (Stalled, urllib3.exceptions.ReadTimeoutError)):
        return "read_timeout"
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return "stream_cut"
    # A connection that never carried the request: refused, reset, timed out while connecting (by
    # type: requests.ConnectTimeout is a ConnectionError, Python's ConnectionError covers resets).
    if isinstance(error, (requests.exceptions.ConnectionError, urllib3.exceptions.NewConnectionError, ConnectionError)):
        return "connection"
    return type(error).__name__
