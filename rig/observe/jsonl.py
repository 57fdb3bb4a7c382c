"""Samples files: one JSON object a line, appended and flushed as taken, so a killed run keeps them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any


def append(out: IO[str], entry: dict[str, Any]) -> None:
    out.write(json.dumps(entry) + "\n")
    out.flush()


def read(path: Path | str) -> list[dict[str, Any]]:
    """Every complete line; a line cut by a kill mid-write is skipped."""
    entries = []
    for line in Path(path).read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries
