"""The one place rig speaks to a server: the API key on every request, and the OpenAI streaming
protocol (server-sent events of chat or completion chunks).

Every request rig makes (health, models, tokenize, metrics, cache reset, greedy identity,
logprob scoring, the load itself) authenticates the same way, so a keyed server never answers
401 to one of them. The key comes from RIG_API_KEY in rig's environment only and is never
written anywhere. This module imports only the standard library: the Locust workers import it.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

API_KEY_ENV = "RIG_API_KEY"


def auth_headers(environ: dict[str, str] | None = None) -> dict[str, str]:
    key = (os.environ if environ is None else environ).get(API_KEY_ENV)
    if key and (key != key.strip() or any(ord(c) < 33 or ord(c) == 127 for c in key)):
        # An HTTP library's own error would quote the header, key and all: refuse first, never show it.
        from rig.errors import Invalid

        raise Invalid("environment", API_KEY_ENV, f"holds whitespace or a control character ({len(key)} characters; "
                      "the value is not shown)", f"set {API_KEY_ENV} to the key alone, on one line")
    return {"Authorization": f"Bearer {key}"} if key else {}


def get_json(url: str, timeout: float = 5.0) -> Any:
    """GET a JSON document from our own server, authenticated."""
    request = urllib.request.Request(url, headers=auth_headers())  # noqa: S310 - our own server's URL
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


def get_status(url: str, timeout: float = 3.0) -> int:
    """The HTTP status of an authenticated GET (raises OSError when nothing answers)."""
    request = urllib.request.Request(url, headers=auth_headers())  # noqa: S310
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return response.status


def session() -> Any:
    """A requests session that authenticates every request."""
    import requests

    client = requests.Session()
    client.headers.update(auth_headers())
    return client


def output_piece(choice: dict[str, Any], chat: bool) -> str | None:
    """A chunk's output text: completion text, or chat content or reasoning content (thinking
    models stream reasoning first); both are output tokens and both are part of the output."""
    if not chat:
        return choice.get("text") or None
    delta = choice.get("delta") or {}
    return delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or None


@dataclass
class StreamEvent:
    """One parsed `data:` line: the output text it carries (if any), usage, finish reason, logprobs."""

    text: str = ""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    logprobs: list[Any] = field(default_factory=list)

    @property
    def has_output(self) -> bool:
        return bool(self.text)


def parse_event(line: bytes, chat: bool) -> StreamEvent | None:
    """A server-sent-event line -> its event; None for comments, keep-alives and `[DONE]`."""
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    payload = json.loads(data)
    event = StreamEvent(usage=payload.get("usage") or None)
    pieces = []
    for choice in payload.get("choices") or []:
        piece = output_piece(choice, chat)
        if piece:
            pieces.append(piece)
        if choice.get("finish_reason"):
            event.finish_reason = choice["finish_reason"]
        if choice.get("logprobs"):
            event.logprobs.append(choice["logprobs"])
    event.text = "".join(pieces)
    return event


def parse_stream(lines: Iterable[bytes], chat: bool) -> Iterator[StreamEvent]:
    for line in lines:
        event = parse_event(line, chat)
        if event is not None:
            yield event
