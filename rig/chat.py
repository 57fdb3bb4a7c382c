"""A streamed chat request against a booted server: what `make demo` prints."""

from __future__ import annotations

import json
import sys
import time

import requests


def stream_chat(base_url: str, model: str, prompt: str, max_tokens: int = 48, out=sys.stdout) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = None
    chunks = 0
    usage = None
    text = []
    with requests.post(f"{base_url}/v1/chat/completions", json=body, stream=True, timeout=120) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            event = json.loads(payload)
            usage = event.get("usage") or usage
            for choice in event.get("choices", []):
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    if first is None:
                        first = time.perf_counter()
                    chunks += 1
                    text.append(piece)
                    out.write(piece)
                    out.flush()
    out.write("\n")
    end = time.perf_counter()
    return {"text": "".join(text), "chunks": chunks, "usage": usage,
            "ttft_s": None if first is None else first - start, "total_s": end - start}
